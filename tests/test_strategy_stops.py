"""Every run ends by itself and says why: broken, misshapen, empty and hanging nodes."""

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, FAILED_STOPS, GSGM, SSGD
from fl_async.strategies import nodes as nodes_module
from fl_async.strategies.run import node_wait

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def run(strategy, nodes, **kwargs):
    grid = FakeGrid(nodes)
    result = strategy.start(
        grid, initial_arrays(), num_rounds=50, timeout=5, train_config=TRAIN, **kwargs
    )
    return result, grid


@pytest.mark.parametrize("preset", [ASGD, GSGM, SSGD])
@pytest.mark.parametrize("mode", ["fail", "wrong_shape", "no_arrays"])
def test_a_fleet_that_cannot_train_ends_the_run_with_its_reason(preset, mode, monkeypatch):
    # With nothing in flight a failed node waits 0.1, 0.2, 0.4, 0.8 s before its next try:
    # pacing only here (test_strategy_parts checks the back-off), cut to a tenth.
    monkeypatch.setattr(nodes_module, "RETRY_DELAY", 0.01)
    nodes = quadratic_fleet(4, seed=1, modes=dict.fromkeys(range(4), mode))
    result, grid = run(preset(clock=VirtualClock(seed=0), min_nodes=4), nodes)
    assert result.stopped_by == "no-active-nodes" and not result.completed
    assert result.stopped_by in FAILED_STOPS
    assert "every node left the run after 5" in result.stop_detail
    assert result.num_updates == 0
    assert "timeout" not in result.faults  # each failure was read at once, none waited out
    # each node was tried max_failures (5) times, then left: no endless re-sending
    assert sum(1 for _, kind in grid.log if kind == "train") == 4 * 5
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())


def test_one_broken_node_leaves_and_the_others_finish_the_budget():
    nodes = quadratic_fleet(4, seed=2, modes={0: "fail"})
    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=4, max_failures=3)
    result, grid = run(strategy, nodes)
    broken = next(k for k, n in nodes.items() if n.partition_id == 0)
    assert result.stopped_by == "budget" and result.completed
    assert sum(1 for node, kind in grid.log if node == broken and kind == "train") == 3
    assert result.faults["error"] == 3


def test_a_hanging_node_is_ended_by_the_timeout_and_the_run_finishes_without_it():
    nodes = quadratic_fleet(3, seed=3, modes={1: "silent"})
    grid = FakeGrid(nodes)
    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=3, max_failures=2)
    result = strategy.start(grid, initial_arrays(), num_rounds=3, timeout=0.3, train_config=TRAIN)
    assert result.stopped_by == "budget"
    assert result.faults["timeout"] == 2  # it hung twice, then left the run
    assert result.num_updates == 9


@pytest.mark.parametrize("preset", [ASGD, SSGD])
def test_max_wall_time_ends_a_run_waiting_on_a_hanging_node_before_its_timeout(preset):
    """The wall limit is looked at while the loop waits for a reply, not only when one comes:
    a node that hangs with a TTL of an hour does not keep a 1-second run alive."""
    nodes = quadratic_fleet(3, seed=3, modes={1: "silent"})
    strategy = preset(clock=VirtualClock(seed=0), min_nodes=3)
    result = strategy.start(
        FakeGrid(nodes),
        initial_arrays(),
        num_rounds=50,
        timeout=3600,
        train_config=TRAIN,
        max_wall_time=1.0,
    )
    assert result.stopped_by == "max-wall-time" and result.wall_time >= 1.0
    assert result.faults.get("timeout", 0) == 0  # the hanging task was left, not timed out


def test_no_accepted_update_for_patience_tasks_stops_with_no_progress():
    nodes = quadratic_fleet(3, seed=4, modes=dict.fromkeys(range(3), "nan"))
    strategy = GSGM(clock=VirtualClock(seed=0), min_nodes=3, max_failures=100, patience=7)
    result, _ = run(strategy, nodes)
    assert result.stopped_by == "no-progress"
    assert result.stop_detail == "7 tasks in a row ended without an accepted update"
    assert result.rejected == {"non-finite": 7}


def test_a_rejection_for_staleness_is_not_held_against_the_node():
    nodes = quadratic_fleet(4, seed=5)
    strategy = ASGD(clock=VirtualClock(seed=3), min_nodes=4, max_staleness=0, max_failures=1)
    result, _ = run(strategy, nodes, max_updates=20)
    assert result.rejected.get("too-stale", 0) > 0
    assert result.stopped_by == "budget"


class CountingGrid(FakeGrid):
    """A FakeGrid that counts its pulls of replies."""

    pulls = 0

    def pull_messages(self, message_ids):  # noqa: D102
        self.pulls += 1
        return super().pull_messages(message_ids)


def test_a_poll_interval_above_the_backoff_cap_is_kept_while_waiting():
    """The clock makes the run wait on a node that hangs for the whole 1-s run: with
    ``poll_interval=0.25`` the loop pulls about four times a second (6 pulls in all, with the
    first tasks'), not twenty (14: the back-off used to shrink such a wait to 50 ms). No
    identify query: its wait has no back-off, and would use the second."""
    grid = CountingGrid(quadratic_fleet(3, seed=3, modes={1: "silent"}))
    strategy = ASGD(
        clock=VirtualClock(seed=0), min_nodes=3, poll_interval=0.25, identify_nodes=False
    )
    result = strategy.start(
        grid, initial_arrays(), num_rounds=50, timeout=3600, train_config=TRAIN, max_wall_time=1.0
    )
    assert result.stopped_by == "max-wall-time"
    assert 2 <= grid.pulls <= 8, grid.pulls


@pytest.mark.parametrize("poll_interval, wait", [(0.02, 0.2), (0.005, 0.05)])
def test_a_run_waiting_for_its_nodes_looks_every_ten_poll_intervals_at_most_every_02_s(
    poll_interval, wait
):
    """With nothing in flight (every node failed and waits ``RETRY_DELAY`` before its next
    try) the run looks at the grid every ``node_wait`` seconds: ten poll intervals, at most
    0.2 s, what the default 0.02 s gives."""
    assert node_wait(poll_interval) == pytest.approx(wait) and node_wait(0.25) == 0.2
    grid = FakeGrid(quadratic_fleet(2, seed=1, modes=dict.fromkeys(range(2), "fail")))
    strategy = ASGD(
        clock=VirtualClock(seed=0), min_nodes=2, max_failures=2, poll_interval=poll_interval
    )
    result = strategy.start(grid, initial_arrays(), num_rounds=5, timeout=5, train_config=TRAIN)
    assert result.stopped_by == "no-active-nodes"
    assert strategy._run.node_wait == pytest.approx(wait)
