"""When the loop evaluates: once per model version, and after sending the next tasks when the
evaluation cannot stop the run (so the nodes train while the server evaluates), step 0 too."""

from collections import Counter

import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, MetricRecord

from fl_async.scheduling import VirtualClock
from fl_async.strategies import GSGM, SSGD

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


class Evaluation:
    """An ``evaluate_fn`` that notes each call's server step and the train tasks sent so far."""

    def __init__(self, grid: FakeGrid, accuracy: float = 0.5) -> None:
        self.grid, self.accuracy = grid, accuracy
        self.calls: list[tuple[int, int]] = []

    def __call__(self, step: int, arrays) -> MetricRecord:
        sent = sum(kind == "train" for _, kind in self.grid.log)
        self.calls.append((step, sent))
        return MetricRecord({"accuracy": self.accuracy, "evaluated-step": step})


def test_each_version_is_evaluated_once_however_many_grid_points_it_spans():
    # SSGD steps once per round of 4 updates: 40 grid points over 3 rounds share few versions.
    grid = FakeGrid(quadratic_fleet(4, seed=1), delay_seed=2)
    evaluate = Evaluation(grid)
    strategy = SSGD(clock=VirtualClock(seed=3), min_nodes=4, eval_grid=40)
    budget = 200.0
    result = strategy.start(
        grid,
        initial_arrays(),
        num_rounds=3,
        timeout=60,
        train_config=TRAIN,
        evaluate_fn=evaluate,
        max_virtual_time=budget,
    )
    points = result.evaluate_metrics_grid
    assert sorted(points) == list(range(1, 41))
    for record in points.values():
        assert record["server-step"] == record["evaluated-step"]
    calls = Counter(step for step, _ in evaluate.calls)
    assert max(calls.values()) == 1, calls  # no version evaluated twice
    versions = {record["server-step"] for record in points.values()}
    assert len(evaluate.calls) < len(points) and versions <= set(calls)


def test_the_next_tasks_are_sent_before_an_evaluation_that_cannot_stop_the_run():
    # GSGM's white list (slack 0) holds every node until the cycle ends, and a cycle of 4
    # updates ends at the evaluation due every 4 steps: the next cycle goes out before it.
    grid = FakeGrid(quadratic_fleet(4, seed=1), delay_seed=2)
    evaluate = Evaluation(grid)
    result = GSGM(clock=VirtualClock(seed=3), min_nodes=4).start(
        grid,
        initial_arrays(),
        num_rounds=3,
        timeout=60,
        train_config=TRAIN,
        evaluate_fn=evaluate,
    )
    assert result.num_updates == 12
    due = [(step, sent) for step, sent in evaluate.calls if step in (0, 4, 8)]
    # cycle k+1's four tasks were out when step 4k was evaluated: at step 0, the first four
    assert due == [(0, 4), (4, 8), (8, 12)]


def test_an_evaluation_that_may_stop_the_run_comes_before_the_next_tasks():
    # With a target accuracy the evaluation decides whether to go on: nothing is sent first.
    grid = FakeGrid(quadratic_fleet(4, seed=1), delay_seed=2)
    evaluate = Evaluation(grid, accuracy=0.0)
    GSGM(clock=VirtualClock(seed=3), min_nodes=4).start(
        grid,
        initial_arrays(),
        num_rounds=3,
        timeout=60,
        train_config=TRAIN,
        evaluate_fn=evaluate,
        target_accuracy=0.9,
    )
    due = [(step, sent) for step, sent in evaluate.calls if step in (0, 4, 8)]
    assert due == [(0, 0), (4, 4), (8, 8)]
