"""A numpy ServerApp and ClientApp for strategy tests in Flower's simulation engine.

Each virtual node minimises ``||w - target_k||^2 / 2`` (targets from its partition id) with a
few SGD steps seeded by the task's ``task-seed``: cheap, deterministic, and enough to show
ordering, staleness and faults. ``run_many(...)`` runs several strategy runs (``scenario(...)``)
one after another in one in-process simulation and returns what each run's strategy returned,
by name; ``run(...)`` is one run in a simulation of its own. ``run_app(...)`` runs the real
Flower App of this repository through ``python -m fl_async.app``'s launcher (in this process)
and returns its history.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fl_async.protocol import to_record

ROOT = Path(__file__).resolve().parents[1]
DIM = 6
client = ClientApp()
server = ServerApp()
SETUP: dict[str, Scenario] = {}  # the ServerApp's runs by name, filled by run_many()
RESULTS: dict[str, Any] = {}  # each run's result (or the error it raised), by name


@dataclass(frozen=True)
class Scenario:
    """One strategy run for the ServerApp: a factory (a new strategy, so nothing a strategy
    keeps per node outlives its run), the task timeout and ``start()``'s other arguments (the
    faults and noise travel in ``train_config``: the ClientApps run in Ray's workers)."""

    strategy: Callable[[], Any]
    timeout: float
    start: dict[str, Any]


def _target(partition: int) -> np.ndarray:
    return np.random.default_rng(partition).normal(size=DIM).astype(np.float32)


@client.query()
def query(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    metrics = MetricRecord({"partition-id": partition, "num-examples": 10 + partition})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


@client.train()
def train(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    config = msg.content.config_records["config"]
    # Settings travel in the task's config: ClientApps run in Ray's worker processes.
    faults = dict(item.split("=") for item in str(config.get("faults", "")).split())
    behaviour = faults.get(str(partition), "ok")
    if behaviour == "raise":
        raise RuntimeError(f"partition {partition} fails on purpose")
    if behaviour == "error":
        return Message(Error(code=1, reason="deliberate error reply"), reply_to=msg)
    record = msg.content.array_records["arrays"]
    w = record.to_numpy_ndarrays()[0]
    seed = int(config.get("task-seed", 0))
    scale = float(config.get("noise", 0.01))
    noise = np.random.default_rng(seed).normal(scale=scale, size=DIM).astype(np.float32)
    for _ in range(int(config.get("local-steps", 3))):
        w = w - np.float32(0.3) * (w - _target(partition) + noise)
    if behaviour == "nan":
        w = np.full_like(w, np.nan)
    if behaviour == "shape":
        w = np.zeros(DIM + 1, np.float32)
    metrics = MetricRecord({"num-examples": 10 + partition, "partition-id": partition})
    reply = RecordDict({"arrays": to_record(list(record.keys()), [w]), "metrics": metrics})
    return Message(reply, reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    """Each scenario in turn on the one grid. A run that raises is recorded as its error, so
    that only the tests reading that run fail, and the next runs still go."""
    for name, setup in SETUP.items():
        try:
            RESULTS[name] = _start(grid, setup)
        except Exception as error:  # re-raised by Outcomes, in the test that reads it
            RESULTS[name] = error


def _start(grid: Grid, setup: Scenario) -> Any:
    """One scenario's run: a new strategy from a zero model. Flower's FedAvg has no
    ``max_updates`` (its budget is ``num_rounds``), so it is not given one."""
    strategy = setup.strategy()
    initial = to_record(["w"], [np.zeros(DIM, np.float32)])
    kwargs = dict(setup.start)
    if isinstance(strategy, FedAvg):
        kwargs.pop("max_updates", None)
    return strategy.start(grid, initial, timeout=setup.timeout, **kwargs)


def scenario(
    strategy_factory: Callable[[], Any], *, faults=None, timeout: float = 60, noise=True, **start
) -> Scenario:
    """A run of ``strategy_factory()``'s strategy: ``faults`` maps a partition id to what its
    node does wrong ("raise", "error", "nan", "shape"); ``start``: ``start()``'s keywords."""
    settings = {"noise": 0.01 if noise else 0.0}
    if faults:
        settings["faults"] = " ".join(f"{k}={v}" for k, v in faults.items())
    start["train_config"] = ConfigRecord(settings)
    return Scenario(strategy_factory, timeout, start)


class Outcomes(dict):
    """Each run's result by name; reading a run that raised raises its error."""

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if isinstance(value, Exception):
            raise RuntimeError(f"the run {name!r} raised") from value
        return value


def run_many(scenarios: Mapping[str, Scenario], *, num_nodes: int = 4) -> Outcomes:
    """The ``scenarios``' runs one after another, in their order, in ONE in-process simulation
    of ``num_nodes`` nodes: a simulation's Ray actors and Flower engine cost a few CPU-seconds
    each, a run of these apps a fraction of one.

    The runs are independent. Each makes its own strategy, with everything it keeps per node
    (the node ids are the same in every run), its own initial model and its own task config.
    A run pulls only the replies to its own messages (Flower's grid pulls by message id, in
    ``pull_messages`` as in ``send_and_receive``), so the tasks an earlier run left in flight
    when it stopped are never handed to a later one: they still run on the actors, which only
    delays the later run in wall time, and every run here orders its replies by a virtual
    clock, or (FedAvg) waits for all of them."""
    from flwr.simulation import run_simulation

    SETUP.clear()
    SETUP.update(scenarios)
    RESULTS.clear()
    run_simulation(server, client, num_supernodes=num_nodes, backend_config=backend_config())
    missing = [name for name in scenarios if name not in RESULTS]
    if missing:
        raise RuntimeError(f"the ServerApp did not finish {missing}: see the log above")
    return Outcomes(RESULTS)


def run(strategy_factory: Callable[[], Any], *, num_nodes: int = 4, **settings) -> Any:
    """One run (``scenario``'s arguments) in a simulation of its own; its result."""
    return run_many({"run": scenario(strategy_factory, **settings)}, num_nodes=num_nodes)["run"]


def target_mean(num_nodes: int, weighted: bool = False) -> np.ndarray:
    weights = [10 + k if weighted else 1 for k in range(num_nodes)]
    return np.average([_target(k) for k in range(num_nodes)], axis=0, weights=weights)


def run_app(
    run_config: Mapping[str, Any], output: Path, *, nodes: int = 4, actors: int | None = None
) -> dict:
    """``python -m fl_async.app`` on ``nodes`` virtual nodes (``actors`` Ray actors: the app's
    default if None) with ``run_config`` (Python values, written as TOML) and ``output-dir`` =
    ``output``; it must succeed. Its ``history.json``."""
    from fl_async.app import launch
    from fl_async.app.results import HISTORY

    settings = {**run_config, "output-dir": str(output)}
    text = " ".join(f"{key}={json.dumps(value)}" for key, value in settings.items())
    argv = ["--app", str(ROOT), "--nodes", str(nodes), "--run-config", text]
    if actors is not None:
        argv += ["--actors", str(actors)]
    assert launch.main(argv) == 0
    return json.loads((output / HISTORY).read_text())


def backend_config(actors: int = 1) -> dict[str, Any]:
    """``actors`` actors of one CPU each: in a Ray that Flower starts with that many CPUs, or in
    the head at ``RAY_ADDRESS`` (``shared_ray``'s has 1), which takes no CPU count from a driver
    that joins it. One by default: each actor costs seconds of CPU to start (Ray, Flower and
    the app's imports), and no check here needs two."""
    config: dict[str, Any] = {"client_resources": {"num_cpus": 1}}
    if "RAY_ADDRESS" not in os.environ:
        config["init_args"] = {"num_cpus": actors}
    return config


@contextmanager
def shared_ray(directory: Path) -> Iterator[None]:
    """One Ray head (1 CPU: one actor) that every in-process simulation inside joins
    (``RAY_ADDRESS``), instead of each starting and stopping a Ray of its own; stopped at the
    end."""
    import ray._private.ray_constants as ray_constants

    from fl_async.app.local_ray import LOOPBACK, RayHead

    head = RayHead(
        1,
        dict(os.environ),
        cwd=directory,
        log_file=directory / "ray.log",
        on_failure=lambda reason: None,
    )
    try:
        while not head.ready.wait(0.2):
            assert head.failure is None, head.failure
        with pytest.MonkeyPatch.context() as patch:  # puts back a RAY_ADDRESS set before
            patch.setenv("RAY_ADDRESS", head.address)
            # The head listens on loopback only: its drivers must look for it there. This
            # process, the driver, read LOOPBACK's variable when it imported Ray: set it too.
            for key, value in LOOPBACK.items():
                patch.setenv(key, value)
            patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
            yield
    finally:
        head.stop()
