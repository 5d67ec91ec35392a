"""Helpers shared by the ``test_strategy_*`` files: the training config, the task identity
every test runs under (an autouse fixture: import it), a run on an in-memory grid, and a run's
per-update records."""

import pytest
from fakegrid import FakeGrid, initial_arrays, task_identity
from flwr.app import ConfigRecord

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def run(strategy, nodes, *, delay_seed=0, max_delay=3, num_rounds=3, train_config=TRAIN, **kwargs):
    """``strategy.start`` on an in-memory grid of ``nodes`` (replies released after up to
    ``max_delay`` pulls, drawn from ``delay_seed``); the result and the grid."""
    grid = FakeGrid(nodes, delay_seed=delay_seed, max_delay=max_delay)
    result = strategy.start(
        grid,
        initial_arrays(),
        num_rounds=num_rounds,
        timeout=5,
        train_config=train_config,
        **kwargs,
    )
    return result, grid


def model(result):
    return result.arrays.to_numpy_ndarrays()


def records(result):
    """Every per-update record of ``result``, in update order, as dicts."""
    return [dict(r) for _, r in sorted(result.train_metrics_clientapp.items())]


def history(result):
    """Every per-update record except what another run of the same seed may change: wall
    times and node ids (a restart or a new grid gives new ones)."""
    return [
        {k: v for k, v in r.items() if k not in ("wall-time", "node-id")} for r in records(result)
    ]
