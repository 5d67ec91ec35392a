"""Helpers shared by the ``test_strategy_loop_*`` files: the training config, the task identity
every test runs under (an autouse fixture: import it), and a run on an in-memory grid."""

import pytest
from fakegrid import FakeGrid, initial_arrays, task_identity
from flwr.app import ConfigRecord

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def run(strategy, nodes, *, delay_seed=0, num_rounds=3, **kwargs):
    grid = FakeGrid(nodes, delay_seed=delay_seed)
    result = strategy.start(
        grid, initial_arrays(), num_rounds=num_rounds, timeout=5, train_config=TRAIN, **kwargs
    )
    return result, grid


def model(result):
    return result.arrays.to_numpy_ndarrays()


def history(result):
    """Everything recorded per update except wall time."""
    return [
        {k: v for k, v in dict(r).items() if k not in ("wall-time", "node-id")}
        for _, r in sorted(result.train_metrics_clientapp.items())
    ]
