"""Evaluation in the event loop on an in-memory grid (every N steps, federated, on the grid of
virtual times), and resuming from a checkpoint, which must equal an uninterrupted run."""

import numpy as np
import pytest
from fakegrid import quadratic_fleet
from flwr.app import MetricRecord
from strategy_loop import (
    _identity,  # noqa: F401  (autouse: every test runs under task_identity())
    history,
    model,
    run,
)

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, GSGM, ODSGD, FedBuff


def test_evaluation_every_n_steps_and_at_the_end_and_target_accuracy():
    nodes = quadratic_fleet(4, seed=12)
    steps = []

    def evaluate(step, arrays):
        steps.append(step)
        return MetricRecord({"accuracy": step / 10})

    result, _ = run(
        ASGD(clock=VirtualClock(seed=0), min_nodes=4, eval_every=3),
        nodes,
        num_rounds=5,
        evaluate_fn=evaluate,
        target_accuracy=0.6,
    )
    assert steps[0] == 0 and steps[1] == 3
    assert result.stopped_by == "target-accuracy"
    assert max(result.evaluate_metrics_serverapp) == 6
    record = result.evaluate_metrics_serverapp[3]
    assert {"accuracy", "virtual-time", "wall-time", "num-updates"} <= set(record)


def test_federated_evaluation_at_the_end():
    strategy = FedBuff(clock=VirtualClock(seed=0), min_nodes=3, federated_evaluation=True)
    result, grid = run(strategy, quadratic_fleet(3, seed=19), num_rounds=2)
    (step, metrics) = next(iter(result.evaluate_metrics_clientapp.items()))
    assert step == result.server_steps and metrics["loss"] > 0
    assert any(kind == "evaluate" for _, kind in grid.log)


def step_of(step, arrays):
    return MetricRecord({"evaluated-step": step})


def test_the_grid_evaluates_the_model_in_force_at_equally_spaced_virtual_times():
    nodes = quadratic_fleet(4, seed=6)
    strategy = ASGD(clock=VirtualClock(seed=2), min_nodes=4, eval_grid=5)
    result, _ = run(strategy, nodes, num_rounds=100, max_virtual_time=300.0, evaluate_fn=step_of)
    grid = result.evaluate_metrics_grid
    assert sorted(grid) == [1, 2, 3, 4, 5]
    finishes = [r["virtual-time"] for r in result.train_metrics_clientapp.values()]
    for index, record in grid.items():
        at = 300.0 * index / 5
        assert record["virtual-time"] == at
        # the version in force: every update applied at or before that time, none after
        assert record["server-step"] == record["evaluated-step"]
        assert record["server-step"] == sum(1 for f in finishes if f <= at)


def test_the_last_grid_point_is_the_budget_itself():
    from fl_async.strategies.evaluation import grid_times

    budget = 27636.41174326229  # a real SSGD budget: budget * 40 / 40 is one ulp above it
    assert budget * 40 / 40 > budget
    points = grid_times(40, budget)
    assert points[-1] == (40, budget) and points[0] == (1, budget * 1 / 40)


def test_a_grid_needs_a_clock_and_a_virtual_budget():
    with pytest.raises(ValueError, match="eval_grid needs a clock"):
        ASGD(eval_grid=4)
    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=2, eval_grid=4)
    with pytest.raises(ValueError, match="eval_grid needs start\\(max_virtual_time"):
        run(strategy, quadratic_fleet(2), num_rounds=1)


@pytest.mark.parametrize("preset", [GSGM, ODSGD])  # ODSGD: tasks with their own bases
def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path, preset):
    def make(directory=None):
        every = 2 if directory else None
        clock = VirtualClock(seed=5)
        return preset(
            clock=clock, min_nodes=4, seed=3, checkpoint_dir=directory, checkpoint_every=every
        )

    full, _ = run(make(), quadratic_fleet(4, seed=15), num_rounds=5)
    first, _ = run(make(tmp_path), quadratic_fleet(4, seed=15), num_rounds=5, max_updates=9)
    assert first.num_updates == 9
    resumed, _ = run(make(tmp_path), quadratic_fleet(4, seed=15), num_rounds=5)
    assert resumed.num_updates == full.num_updates == 20
    for a, b in zip(model(full), model(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
    assert history(full) == history(resumed)


def test_a_resumed_run_keeps_its_grid(tmp_path):
    def make(directory=None):
        every = 3 if directory else None
        return GSGM(
            clock=VirtualClock(seed=5),
            min_nodes=4,
            seed=3,
            eval_grid=6,
            checkpoint_dir=directory,
            checkpoint_every=every,
        )

    full, _ = run(
        make(),
        quadratic_fleet(4, seed=12),
        num_rounds=50,
        max_virtual_time=1500.0,
        evaluate_fn=step_of,
    )
    nodes = quadratic_fleet(4, seed=12)
    first, _ = run(
        make(tmp_path),
        nodes,
        num_rounds=50,
        max_virtual_time=1500.0,
        max_updates=6,
        evaluate_fn=step_of,
    )
    assert 0 < len(first.evaluate_metrics_grid) < 6  # stopped part way through the grid
    strategy = make(tmp_path)  # the same directory: it resumes
    resumed, _ = run(strategy, nodes, num_rounds=50, max_virtual_time=1500.0, evaluate_fn=step_of)
    clean = {
        k: {n: v for n, v in dict(r).items() if n != "wall-time"}
        for k, r in resumed.evaluate_metrics_grid.items()
    }
    expected = {
        k: {n: v for n, v in dict(r).items() if n != "wall-time"}
        for k, r in full.evaluate_metrics_grid.items()
    }
    assert clean == expected
