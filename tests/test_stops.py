"""The stop reasons on their own, in the order they are looked at, and the argument pairs no
single check sees."""

import time

import pytest
from flwr.app import MetricRecord
from loop_parts import _identity, make_run  # noqa: F401

from fl_async.aggregators import ASGD, UpdateGuard
from fl_async.scheduling import VirtualClock
from fl_async.strategies.stops import Limits, check_pairs, stop_reason
from fl_async.validation import InvalidArgument

OFF = UpdateGuard.of(None)


def reason(run, limits, *, requested=False, all_left=False):
    return stop_reason(limits, run, requested, "accuracy", lambda: all_left, OFF)


def test_each_budget_and_limit_stops_the_run_in_its_turn():
    run, _ = make_run()
    assert reason(run, Limits(10)) == ""
    assert reason(run, Limits(10), requested=True) == "should-stop"
    run.recorder.num_updates = 4
    assert reason(run, Limits(10, max_updates=4)) == "budget"
    assert Limits(3, max_updates=4).updates == 3
    run.max_wall_time, run.recorder.wall_start = 1.0, time.time() - 2.0
    assert reason(run, Limits(10)) == "max-wall-time"
    run.max_wall_time = None
    run.order.now = 5.0
    assert reason(run, Limits(10, max_virtual_time=5.0)) == "max-virtual-time"
    run.recorder.evaluation(0, MetricRecord({"accuracy": 0.9}), now=0.0, when="")
    assert reason(run, Limits(10, target=0.8)) == "target-accuracy"
    assert reason(run, Limits(10), all_left=True) == "no-active-nodes"


def test_no_progress_stops_after_patience_tasks_without_an_accepted_update():
    run, _ = make_run()
    run.patience, run.recorder.since_progress = 3, 3
    assert reason(run, Limits(10)) == "no-progress"
    assert run.stop_detail == "3 tasks in a row ended without an accepted update"


def test_settings_that_need_another_are_refused():
    clock = VirtualClock(seed=0)
    with pytest.raises(InvalidArgument, match="fl_async Aggregator"):
        check_pairs(object(), clock, None, None, None, None)
    with pytest.raises(InvalidArgument, match="checkpoint_every needs checkpoint_dir"):
        check_pairs(ASGD(), clock, None, 5, None, None)
    with pytest.raises(InvalidArgument, match="eval_grid needs a clock"):
        check_pairs(ASGD(), None, None, None, 4, None)
    with pytest.raises(InvalidArgument, match="send_ahead=2 needs a clock"):
        check_pairs(ASGD(), None, None, None, None, 2)
    check_pairs(ASGD(), clock, "dir", 5, 4, 2)
