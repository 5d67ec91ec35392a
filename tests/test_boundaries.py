"""Boundaries on their own: central evaluations when due and once per server step, the grid's
points, and ``should_stop`` at each evaluation boundary."""

from flwr.app import MetricRecord
from loop_parts import _identity, make_run, step  # noqa: F401

from fl_async.strategies.evaluation import Boundaries, grid_times


def counting(calls):
    def evaluate_fn(server_step, arrays):
        calls.append(server_step)
        return MetricRecord({"accuracy": 0.1 * server_step})

    return evaluate_fn


def test_an_evaluation_is_due_every_eval_every_steps_and_sends_the_tasks_first():
    run, _ = make_run()
    run.eval_every = 2
    calls, order = [], []
    boundaries = Boundaries(run, evaluate_fn=counting(calls), should_stop=None)
    boundaries.evaluate()  # step 0
    step(run)
    boundaries.at_step(dispatch=lambda: order.append("dispatch"))
    assert calls == [0] and order == []  # one step since: not due
    step(run)
    boundaries.at_step(dispatch=lambda: order.append(f"dispatch before {len(calls)}"))
    assert calls == [0, 2] and order == ["dispatch before 1"]
    assert sorted(run.recorder.result.evaluate_metrics_serverapp) == [0, 2]


def test_grid_points_see_the_model_in_force_and_evaluate_fn_runs_once_per_step():
    run, _ = make_run()
    calls = []
    points = grid_times(4, 8.0)
    assert points == [(1, 2.0), (2, 4.0), (3, 6.0), (4, 8.0)]
    boundaries = Boundaries(run, evaluate_fn=counting(calls), should_stop=None, points=points)
    boundaries.evaluate_grid(until=5.0)
    assert calls == [0] and sorted(run.recorder.result.evaluate_metrics_grid) == [1, 2]
    boundaries.evaluate()  # the same step: evaluate_fn is not called again
    assert calls == [0]
    boundaries.evaluate_grid(until=8.0, inclusive=True)
    assert sorted(run.recorder.result.evaluate_metrics_grid) == [1, 2, 3, 4]
    assert boundaries.points == []


def test_should_stop_is_asked_at_an_evaluation_boundary_with_the_current_model():
    run, _ = make_run()
    run.eval_every = 1
    asked = []

    def should_stop(server_step, result):
        asked.append((server_step, result.arrays is not None))
        return server_step >= 2

    boundaries = Boundaries(run, evaluate_fn=counting([]), should_stop=should_stop)
    step(run)
    boundaries.at_step()
    assert not boundaries.stop_requested
    step(run)
    boundaries.at_step()
    assert boundaries.stop_requested and asked == [(1, True), (2, True)]
    assert run.stop_detail == "should_stop returned True at server step 2"
