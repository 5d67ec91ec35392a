"""``start(should_stop=...)``, Flower 1.43's early stop, asked at each evaluation boundary."""

import inspect

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, MetricRecord
from flwr.serverapp.strategy import Strategy

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, COMPLETED_STOPS, FedBuff
from fl_async.validation import InvalidArgument

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def start(strategy, **kwargs):
    grid = FakeGrid(quadratic_fleet(4, seed=5), delay_seed=2)
    return strategy.start(
        grid, initial_arrays(), num_rounds=5, timeout=5, train_config=TRAIN, **kwargs
    )


def test_should_stop_is_asked_at_each_evaluation_boundary_and_stops_the_run():
    asked = []

    def should_stop(step, result):
        model = [a.copy() for a in result.arrays.to_numpy_ndarrays()]
        asked.append((step, sorted(result.evaluate_metrics_serverapp), model))
        return step >= 6

    def evaluate(step, arrays):
        return MetricRecord({"accuracy": step / 100})

    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=4, eval_every=3)
    result = start(strategy, evaluate_fn=evaluate, should_stop=should_stop)
    # never for step 0 (Flower: "not called for round zero"); after that boundary's evaluation
    assert [(step, evaluated) for step, evaluated, _ in asked] == [(3, [0, 3]), (6, [0, 3, 6])]
    assert result.stopped_by == "should-stop" and result.completed
    assert "should-stop" in COMPLETED_STOPS
    assert "server step 6" in result.stop_detail
    assert result.server_steps == 6 and result.num_updates == 6
    # the result handed over held the model of that step, which is the run's final model
    for asked_array, final in zip(asked[-1][2], result.arrays.to_numpy_ndarrays(), strict=True):
        np.testing.assert_array_equal(asked_array, final)


def test_a_run_that_never_stops_early_is_unchanged():
    def evaluate(step, arrays):
        return MetricRecord({"accuracy": 0.5})

    plain = start(ASGD(clock=VirtualClock(seed=0), min_nodes=4), evaluate_fn=evaluate)
    asked = []
    never = start(
        ASGD(clock=VirtualClock(seed=0), min_nodes=4),
        evaluate_fn=evaluate,
        should_stop=lambda step, result: asked.append(step) or False,
    )
    assert never.stopped_by == plain.stopped_by == "budget"
    assert asked == [4, 8, 12, 16, 20]  # eval_every: the number of nodes; also at the last
    for a, b in zip(
        plain.arrays.to_numpy_ndarrays(), never.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_the_boundaries_are_server_steps_also_without_evaluate_fn_or_with_a_buffer():
    asked = []
    strategy = FedBuff(clock=VirtualClock(seed=0), min_nodes=4, buffer_size=2, eval_every=2)
    result = start(strategy, should_stop=lambda step, result: asked.append(step) or step >= 4)
    assert asked == [2, 4]
    assert result.stopped_by == "should-stop"
    assert result.server_steps == 4 and result.num_updates == 8  # two updates per server step


def test_should_stop_takes_flowers_place_in_the_signature():
    ours = list(inspect.signature(ASGD.start).parameters)
    flowers = list(inspect.signature(Strategy.start).parameters)
    assert ours[: len(flowers)] == flowers[: len(ours)][: len(flowers)]
    assert ours.index("should_stop") == ours.index("evaluate_fn") + 1
    if "should_stop" in flowers:  # Flower >= 1.43
        assert ours[: len(flowers)] == flowers


def test_a_should_stop_that_is_not_a_function_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="should_stop must be None or a function.*0.5"):
        start(ASGD(clock=VirtualClock(seed=0), min_nodes=4), should_stop=0.5)
