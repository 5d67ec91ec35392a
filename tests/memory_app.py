"""The app's ServerApp ``run`` over in-process nodes that call the real ClientApp: what the main
command runs, without its processes (launcher, SuperLink, Ray)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from fakegrid import FakeGrid
from flwr.app import Context, RecordDict

from fl_async.app import results, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config

FAST = {"local-steps": 1, "batch-size": 16, "model": "logreg"}
"""One SGD step per task of the logistic regression keeps the handlers and the evaluations
quick: the CNN took most of these runs' time evaluating the test split."""


def context(partition=0, num_partitions=4, run_config=None, node_config=None) -> Context:
    """A node's Flower ``Context``: its partition, and the run's config."""
    nodes = {"partition-id": partition, "num-partitions": num_partitions}
    return Context(
        run_id=1,
        node_id=100 + partition,
        node_config=node_config if node_config is not None else nodes,
        state=RecordDict(),
        run_config=dict(run_config or {}),
    )


def run_in_memory(
    tmp_path: Path, name: str, num_nodes: int = 4, *, plots: bool = True, **overrides: Any
):
    """The ServerApp's ``run`` over ``num_nodes`` in-process nodes calling the real handlers;
    its history and output folder (run inside ``fakegrid.task_identity()``). With
    ``plots=False`` its ``history.json`` is written alone."""
    run_config = {
        "num-nodes": num_nodes,
        "max-updates": 8,
        "eval-every": 4,
        "output-dir": str(tmp_path / name),
        **FAST,
        **overrides,
    }
    node_ids = [9000 + 31 * k for k in range(num_nodes)]

    def node(k):
        ctx = context(partition=k, num_partitions=num_nodes, run_config=run_config)
        return lambda message: client_app(message, ctx)

    grid = FakeGrid({node_ids[k]: node(k) for k in range(num_nodes)}, delay_seed=len(name))
    with contextlib.nullcontext() if plots else without_plots():
        output = server_run.run(grid, parse_run_config(run_config))
    return json.loads((output / results.HISTORY).read_text()), output


@contextlib.contextmanager
def without_plots() -> Iterator[None]:
    """Runs in the block write their ``history.json`` without the plots beside it: for a run
    whose history alone is looked at, as the plots cost more than its training."""
    with (
        mock.patch.object(results, "plot_accuracy", _no_plot),
        mock.patch.object(results, "plot_staleness", _no_plot),
    ):
        yield


def _no_plot(history: Any, path: Path) -> None:
    """A plot function that draws nothing."""
