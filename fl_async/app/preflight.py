"""Every check ``python -m fl_async.app`` makes before it starts anything.

The run config (every key, and the chosen preset's own hyperparameters, by building the
strategy), the dataset (present and readable: its training labels are read; fetched first with
``data-download = true``), the split of those labels into ``num-nodes`` partitions (by the
partitioner itself), the clock, the checkpoint a run with ``checkpoint-every`` would resume
from, and the packages of the simulation extra. A bad setting costs
one line and exit code 2, not a SuperLink, a Ray cluster and a traceback from inside the run; a
download that failed (``DownloadError``) one line and exit code 1.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
from flwr.common.config import parse_config_args

from fl_async.app.config import AppConfig, parse_run_config
from fl_async.app.flower_fedavg import FLOWER_FEDAVG
from fl_async.app.strategy_build import build_strategy, make_clock
from fl_async.clients.device import check_device
from fl_async.clients.node_data import synthetic_of
from fl_async.data import Synthetic, load_labels
from fl_async.data.download import ensure, is_downloadable
from fl_async.data.loader import load_owners
from fl_async.data_spec import DataSpec
from fl_async.extras import INSTALL_SIMULATION, require
from fl_async.partitioning import count_matrix
from fl_async.strategies.checkpoint import Checkpointer
from fl_async.tracking import require_backend
from fl_async.validation import InvalidArgument, check_int

_CLOCK_KEYS = ("clock.speed", "clock.sigma", "clock.jitter", "clock.trace", "correlate")


@dataclass(frozen=True)
class Plan:
    """A checked run: the app directory, the number of nodes, the config and the output."""

    app_dir: Path
    nodes: int
    config: AppConfig
    output: Path


def prepare(args: argparse.Namespace) -> Plan:
    """Check the command line and everything it sets; ValueError, TypeError or ImportError
    (one line) name what is wrong and what is allowed."""
    app_dir = _app_dir(args.app)
    if args.actors is not None:  # None on a Ray cluster, whose machines set their CPUs
        check_int("--actors", args.actors, minimum=1)
    overrides = parse_overrides(args.run_config)
    if args.nodes is not None:
        overrides["num-nodes"] = check_int("--nodes", args.nodes, minimum=1)
    config = parse_run_config(overrides)
    require("python -m fl_async.app", "ray", "matplotlib")
    if config.values["tracking.backend"]:
        require_backend(str(config.values["tracking.backend"]))
    output = Path(config.output_dir or _default_output(app_dir, config.strategy, config.seed))
    output = output.expanduser().resolve()
    if config.data_download:
        fetch_dataset(config.data)
    check_server_side(config, output)
    return Plan(app_dir=app_dir, nodes=config.num_nodes, config=config, output=output)


def prepare_study(args: argparse.Namespace) -> Plan:
    """``--study DIR``: the study folder (made by ``fl-async bench``, which checked every run
    it hands over) and the simulation's node count; InvalidArgument when either is wrong."""
    from fl_async.app.study_files import read_study

    app_dir = _app_dir(args.app)
    if args.run_config.strip():
        raise InvalidArgument("--study takes no --run-config: each run's is in its request")
    study = Path(args.study).expanduser().resolve()
    nodes = int(read_study(study)["nodes"])
    if args.nodes is not None and args.nodes != nodes:
        raise InvalidArgument(f"--nodes {args.nodes}: the study {study} is for {nodes} nodes")
    require("python -m fl_async.app --study", "ray", "matplotlib")
    config = parse_run_config({"num-nodes": nodes})
    return Plan(app_dir=app_dir, nodes=nodes, config=config, output=study)


def _app_dir(app: str) -> Path:
    """``--app``, made absolute; InvalidArgument unless it holds a pyproject.toml."""
    app_dir = Path(app).expanduser().resolve()
    if not (app_dir / "pyproject.toml").is_file():
        raise InvalidArgument(f"no pyproject.toml in {app_dir}; pass --app <Flower App directory>")
    return app_dir


def parse_overrides(text: str) -> dict[str, Any]:
    """``--run-config`` parsed as ``flwr run`` parses it; InvalidArgument if it cannot be."""
    try:
        return parse_config_args([text]) if text.strip() else {}
    except click.ClickException as error:
        raise InvalidArgument(f"--run-config {text!r}: {error.message}") from error


def fetch_dataset(data: DataSpec) -> None:
    """``data-download = true``: fetch a missing named dataset here, once, before any node
    starts (nodes only read it). The launcher's Hugging Face offline switches apply to the
    processes it starts, not to this one, so the fetch can reach the network."""
    fetched = ensure(data.dataset, root=data.root or None, report=print)
    if fetched is not None:
        print(f"fl-async: {fetched.summary()}")


def check_server_side(config: AppConfig, output: Path) -> None:
    """What the ServerApp does first, without a grid: pick the device, read the dataset's
    labels, split them, build the clock and the strategy (which checks the preset's
    hyperparameters)."""
    try:
        check_device(config.device)
    except (RuntimeError, ValueError) as error:
        raise InvalidArgument(f"run config 'device' = {config.device!r}: {error}") from error
    synthetic = synthetic_of(config.data, config.num_nodes)
    labels = _labels(config.data, synthetic)
    owners = _owners(config.data, synthetic) if config.data.scheme == "natural" else None
    parts = _split(config, labels, owners)
    try:
        clock = make_clock(config, count_matrix(labels, parts))
    except (ValueError, TypeError) as error:
        settings = ", ".join(f"{key} = {config.values[key]!r}" for key in _CLOCK_KEYS)
        raise InvalidArgument(f"run config {settings}: {error}") from error
    if config.strategy != FLOWER_FEDAVG:  # Flower's FedAvg: no preset, its settings checked
        strategy = build_strategy(config, clock=clock, output=output)
        if strategy.checkpoint_dir is not None:
            # The run would resume from it: a damaged or pickled one is refused (one line, the
            # file left in place) before any process starts. Reading it runs no code.
            Checkpointer(strategy.checkpoint_dir, None).load()


def _labels(data: DataSpec, synthetic: Synthetic | None) -> np.ndarray:
    try:
        return load_labels(data.dataset, root=data.root or None, synthetic=synthetic)
    except ImportError as error:
        raise InvalidArgument(
            f"run config 'dataset' = {data.dataset!r}: {error}; {INSTALL_SIMULATION}"
        ) from error
    except (OSError, ValueError, RuntimeError) as error:
        fetch = ""
        if isinstance(error, FileNotFoundError) and is_downloadable(data.dataset):
            fetch = ", or add data-download=true to --run-config (docs/data.md)"
        problem = str(error).rstrip(".")
        key = f"run config 'dataset' = {data.dataset!r}"
        raise InvalidArgument(f"{key}: {problem}{fetch}") from error


def _owners(data: DataSpec, synthetic: Synthetic | None) -> np.ndarray:
    """The owner of each training example, which ``partition.scheme = 'natural'`` splits by."""
    try:
        return load_owners(
            data.dataset,
            root=data.root or None,
            owner_column=data.owner_column or None,
            synthetic=synthetic,
        )
    except (OSError, ValueError) as error:
        column = (
            f" and 'partition.owner-column' = {data.owner_column!r}" if data.owner_column else ""
        )
        raise InvalidArgument(
            f"run config 'partition.scheme' = 'natural'{column}: {str(error).rstrip('.')}"
        ) from error


def _split(config: AppConfig, labels: np.ndarray, owners: np.ndarray | None) -> list[np.ndarray]:
    try:
        return config.data.split(labels, config.num_nodes, owners=owners)
    except (ValueError, TypeError) as error:
        raise InvalidArgument(
            f"cannot split {config.data.dataset!r} ({labels.size} training examples) into "
            f"num-nodes = {config.num_nodes} partitions with partition.scheme = "
            f"{config.data.scheme!r}: {error}"
        ) from error


def _default_output(app_dir: Path, strategy: str, seed: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return app_dir / "outputs" / f"{strategy}-seed{seed}-{stamp}"
