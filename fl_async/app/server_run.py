"""What the ServerApp (``server_app``) runs: strategy, clock, budgets and data of the run config.

It evaluates the global model centrally on the dataset's test split, logs progress at every
evaluation (server step, virtual time, accuracy), and writes ``history.json``, ``accuracy.png``
and ``staleness.png`` to ``output-dir``, then, last, ``run-status.json`` (``run_status``:
the launcher and ``fl-async bench`` read the run's outcome there; docs/running.md).
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from torch import nn

from fl_async.app.config import AppConfig
from fl_async.app.flower_fedavg import FLOWER_FEDAVG, run_flower_fedavg
from fl_async.app.launcher_watch import WatchedGrid, launcher_pid
from fl_async.app.results import STARTED_AT, history_of, write_results
from fl_async.app.root_reference import root_reference
from fl_async.app.run_grid import RunStopped
from fl_async.app.run_status import FAILED, STOPPED, ended, finished, write_run_status
from fl_async.app.strategy_build import build_strategy, make_clock
from fl_async.clients import training
from fl_async.clients.device import limit_torch_threads, select_device
from fl_async.clients.node_data import RunData, load_run_data, new_model
from fl_async.data import Examples
from fl_async.extras import require
from fl_async.models import get_weights, set_weights
from fl_async.partitioning import count_matrix
from fl_async.protocol import to_record
from fl_async.scheduling import VirtualClock
from fl_async.strategies import AsyncResult, AsyncStrategy
from fl_async.tracking import log_run, require_backend


class CentralEvaluation:
    """``evaluate_fn`` for the strategy: loss and accuracy of a model on a test set.

    ``threads`` is the run config's setting: 0 evaluates on one torch thread in a simulation,
    where the ServerApp shares the cores with the ClientApps' actors, and with torch's default
    elsewhere (``limit_torch_threads``). It is applied at each call: Flower starts Ray beside
    the ServerApp, not before it.
    """

    def __init__(
        self, model: nn.Module, test: Examples, device: torch.device, threads: int = 0
    ) -> None:
        self.model = model
        self.test = test
        self.device = device
        self.threads = threads

    def __call__(self, server_step: int, arrays: ArrayRecord) -> MetricRecord:
        """Metrics of ``arrays`` (the global model at ``server_step``)."""
        limit_torch_threads(self.threads)
        set_weights(self.model, arrays.to_numpy_ndarrays())
        metrics = training.evaluate(self.model, self.test, device=self.device)
        return MetricRecord({"accuracy": metrics["accuracy"], "loss": metrics["loss"]})


def run_alone(grid: Grid, config: AppConfig) -> Path:
    """``run`` as a simulation's only run: when it raises, its ``run-status.json`` says why
    (a study records its own runs' endings, ``study_server``). Started by ``fl_async.app``'s
    launcher, the run stops once that launcher is gone (``launcher_watch``)."""
    output = output_directory(config)
    launcher = launcher_pid(os.environ)
    if launcher is not None:
        log(INFO, "fl-async: the run stops if its launcher (process %d) ends first", launcher)
    try:
        return run(grid if launcher is None else WatchedGrid(grid, launcher), config, output)
    except RunStopped as reason:
        log(INFO, "fl-async: the run stopped: %s", reason)
        write_run_status(output, ended(STOPPED, str(reason)))
        return output
    except Exception as error:
        write_run_status(output, ended(FAILED, f"{type(error).__name__}: {error}"))
        raise


def run(grid: Grid, config: AppConfig, output: Path | None = None) -> Path:
    """Train with ``config`` on ``grid``'s nodes and write the results into ``output`` (default:
    ``output_directory``), ``run-status.json`` last; their directory."""
    require("the ServerApp (accuracy.png, staleness.png)", "matplotlib")  # before, not after
    if config.values["tracking.backend"]:  # before the run too
        require_backend(str(config.values["tracking.backend"]))
    output = output or output_directory(config)
    if config.data_download:
        _fetch(config)
    data = load_run_data(config.data, config.num_nodes)
    # The server splits the labels as the nodes do, for the speed ranking and the history.
    labels = data.labels
    parts = config.data.split(labels, config.num_nodes, owners=data.owners)
    counts = count_matrix(labels, parts)
    clock = make_clock(config, counts)
    strategy = _strategy(config, data, clock, output)
    model = new_model(config.data, data, seed=config.seed)
    _log_start(config, data, output)
    if strategy is not None and strategy.checkpoint_dir is not None:
        _log_checkpoints(config, strategy.checkpoint_dir, output)
    started = time.strftime(STARTED_AT)
    if strategy is None:
        result = _train_flower_fedavg(grid, config, model, data.test)
    else:
        result = _train(strategy, grid, config, model, data.test)
    history = history_of(
        result,
        config={**config.values, "output-dir": str(output)},
        num_nodes=config.num_nodes,
        started_at=started,
        versions=_versions(),
        machine=_machine(),
        strategy=_describe_flower() if strategy is None else _describe(strategy),
        dataset=_describe_data(data),
        model={"class": type(model).__name__, "parameters": _num_parameters(model)},
        partitions={
            "sizes": [len(p) for p in parts],
            "classes-held": (counts > 0).sum(axis=1).tolist(),
        },
    )
    paths = write_results(output, history)
    if config.values["tracking.backend"]:
        _track(config, paths[0])
    _log_end(history, result, paths)
    # Last: how the run ended, for the launcher and fl-async bench (run_status).
    write_run_status(output, finished(history, paths))
    return output


def _strategy(
    config: AppConfig, data: RunData, clock: VirtualClock | None, output: Path
) -> AsyncStrategy | None:
    """The run's strategy (None for Flower's own FedAvg); its guard, when on, judges updates
    against the root set's reference (``guard.root-examples``)."""
    if config.strategy == FLOWER_FEDAVG:
        return None
    reference = root_reference(config, data) if config.values["guard.factor"] else None
    return build_strategy(config, clock=clock, output=output, reference=reference)


def _log_end(history: dict[str, Any], result: AsyncResult, paths: list[Path]) -> None:
    log(
        INFO,
        "fl-async: final accuracy %s after %d updates (%s), virtual time %.1f s, wall time "
        "%.1f s; wrote %s",
        _percent(history["final-accuracy"]),
        result.num_updates,
        result.stopped_by,
        result.virtual_time,
        result.wall_time,
        ", ".join(str(p) for p in paths),
    )


def _log_start(config: AppConfig, data: RunData, output: Path) -> None:
    log(
        INFO,
        "fl-async: %s on %s (%d train / %d test), %d nodes, %s split, %s clock; results -> %s",
        config.strategy,
        config.data.dataset,
        len(data.labels),
        len(data.test),
        config.num_nodes,
        config.data.scheme,
        config.clock,
        output,
    )


def _track(config: AppConfig, history_file: Path) -> None:
    """Log the run to the tracker of the ``tracking.*`` keys, from the ``history.json`` just
    written: the tracker shows what that file holds."""
    values = config.values
    tracker = log_run(
        json.loads(history_file.read_text()),
        backend=str(values["tracking.backend"]),
        uri=str(values["tracking.uri"]),
        run_name=str(values["tracking.run-name"]),
        output_dir=history_file.parent,
    )
    log(INFO, "fl-async: logged the run with %r", tracker)


def _fetch(config: AppConfig) -> None:
    """``data-download = true`` under a plain ``flwr run`` (the launcher fetched it already):
    fetch a missing dataset before the first task, so the nodes of a simulation, which share
    this disk, only read it."""
    from fl_async.data.download import ensure

    fetched = ensure(config.data.dataset, root=config.data.root or None)
    if fetched is not None:
        log(INFO, "fl-async: %s", fetched.summary())


def _train(
    strategy: AsyncStrategy, grid: Grid, config: AppConfig, model: nn.Module, test: Examples
) -> AsyncResult:
    """``strategy.start`` from ``model``'s weights with the run's budgets, evaluating the global
    model centrally on ``test``."""
    return strategy.start(
        grid,
        to_record(list(model.state_dict()), get_weights(model)),
        num_rounds=config.num_rounds,
        timeout=config.timeout,
        train_config=ConfigRecord(config.train_config()),
        evaluate_fn=_evaluation(config, model, test),
        max_updates=config.max_updates,
        max_virtual_time=config.max_virtual_time,
        max_wall_time=config.max_wall_time,
        target_accuracy=config.target_accuracy,
    )


def _train_flower_fedavg(
    grid: Grid, config: AppConfig, model: nn.Module, test: Examples
) -> AsyncResult:
    """Flower's own ``FedAvg`` (``strategy = "flwr-fedavg"``) from ``model``'s weights, with the
    same training settings and central evaluation as a preset."""
    return run_flower_fedavg(
        grid,
        to_record(list(model.state_dict()), get_weights(model)),
        num_nodes=config.num_nodes,
        num_rounds=config.num_rounds,
        timeout=config.timeout,
        train_config=ConfigRecord(config.train_config()),
        evaluate_fn=_evaluation(config, model, test),
        federated_evaluation=config.federated_evaluation,
    )


def _evaluation(config: AppConfig, model: nn.Module, test: Examples) -> CentralEvaluation:
    return CentralEvaluation(
        model, test, select_device(config.device), threads=int(config.values["threads"])
    )


def output_directory(config: AppConfig) -> Path:
    """``output-dir``, or ``outputs/<strategy>-seed<seed>-<time>`` under the working directory."""
    if config.output_dir:
        return Path(config.output_dir).expanduser().resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("outputs", f"{config.strategy}-seed{config.seed}-{stamp}").resolve()


def _log_checkpoints(config: AppConfig, directory: Path, output: Path) -> None:
    """Say where the checkpoints go and how a run resumes from them.

    Without ``output-dir`` the output directory is named by the start time, so the same command
    run again (after a crash) would start over in a new one: say which ``output-dir`` resumes.
    """
    if config.output_dir:
        log(
            INFO,
            "fl-async: checkpoint every %d server steps in %s (a run with the same "
            "output-dir resumes from it)",
            config.checkpoint_every,
            directory,
        )
        return
    log(
        WARNING,
        "fl-async: checkpoint every %d server steps in %s, but output-dir is not set: "
        "the same command run again starts over in a new directory. To resume from this "
        "checkpoint, run with --run-config \"output-dir='%s'\" (and the same other settings)",
        config.checkpoint_every,
        directory,
        output,
    )


def _describe(strategy: AsyncStrategy) -> dict[str, Any]:
    # Read after the run: "auto" hyperparameters are resolved from the number of nodes by then.
    clock = strategy.clock
    return {
        "class": type(strategy).__name__,
        "aggregator": repr(strategy.aggregator),
        "policy": repr(strategy.policy),
        "guard": repr(strategy.guard),
        "clock": None if clock is None else clock.hyperparameters(),
    }


def _describe_flower() -> dict[str, Any]:
    return {
        "class": "flwr.serverapp.strategy.FedAvg",
        "aggregator": "FedAvg (Flower's own)",
        "policy": "synchronous rounds of every node",
        "guard": None,
        "clock": None,
    }


def _describe_data(data: RunData) -> dict[str, Any]:
    shape = "image-shape" if len(data.input_shape) == 3 else "input-shape"
    return {
        "name": data.name,
        "train-examples": len(data.labels),
        "test-examples": len(data.test),
        "num-classes": data.num_classes,
        shape: list(data.input_shape),
    }


def _num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("fl-async", "flwr", "torch", "numpy"):
        found[package] = _version(package)
    return found


def _machine() -> dict[str, Any]:
    """What ran the ServerApp: a study's records name it, so that runs made on different
    kinds of machine are never compared unknowingly. The CPU and the vector instructions torch
    uses on it are named too: torch picks its CPU kernels by them, and kernels that sum floats in
    another order give a seeded run other last bits, and so another history."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "arch": platform.machine(),
        "system": platform.system(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "cpu-capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": gpu,
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name (Linux's ``/proc/cpuinfo``, else ``platform.processor()``), None
    when neither says."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(package: str) -> str:
    # Flower's pre-releases are the distribution flwr-nightly, holding the same flwr package.
    for name in (package, "flwr-nightly") if package == "flwr" else (package,):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
