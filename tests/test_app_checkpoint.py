"""Checkpoints through the main command: ``python -m fl_async.app`` with ``checkpoint-every``,
stopped mid-run, resumed with the same ``output-dir``, gives the uninterrupted run's history."""

import pytest
from simapps import run_app as run_simulation

pytestmark = pytest.mark.slow

NODES = 4
# A budget of num-rounds x nodes = 8 updates; the first part stops after 4 of them.
RUN = {"num-rounds": 2, "eval-every": 2, "local-steps": 2, "checkpoint-every": 2}


def run_app(output, **overrides) -> dict:
    """One ``python -m fl_async.app`` (in this process) with ``RUN``; its history."""
    return run_simulation({**RUN, **overrides}, output, nodes=NODES, actors=1)


def comparable(history: dict) -> dict:
    """What a seeded run fixes: everything but wall times and Flower's random node ids."""
    drop = {"wall-time", "node-id"}
    return {
        key: [{k: v for k, v in entry.items() if k not in drop} for entry in history[key]]
        for key in ("evaluations", "updates")
    } | {key: history[key] for key in ("num-updates", "server-steps", "virtual-time")}


@pytest.mark.slow(seconds=90)
def test_a_run_stopped_mid_way_resumes_to_the_uninterrupted_history(tmp_path):
    first = run_app(tmp_path / "resumed", **{"max-updates": 4})
    assert first["num-updates"] == 4 and (tmp_path / "resumed" / "checkpoint").is_dir()
    resumed = run_app(tmp_path / "resumed")
    uninterrupted = run_app(tmp_path / "uninterrupted")
    assert resumed["num-updates"] == 8 and resumed["stopped-by"] == "budget"
    # Resumed, not restarted: the first part's records come back as they were, with their wall
    # times and the node ids of the first part's simulation (random in every run).
    assert resumed["updates"][:4] == first["updates"]
    assert comparable(resumed) == comparable(uninterrupted)
