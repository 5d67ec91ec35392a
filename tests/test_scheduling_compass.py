"""The Compass policy (FedCompass's scheduler) on its own: local steps from measured speeds,
arrival groups that arrive together on a deterministic clock, the bounds, late nodes, deadlines,
departures and its state (docs/algorithms.md, FedCompass)."""

import heapq
import math

import pytest

from fl_async.scheduling import Compass
from fl_async.validation import InvalidArgument

Q_MIN, Q_MAX = 20, 100


def policy(**kwargs) -> Compass:
    return Compass(min_local_steps=Q_MIN, max_local_steps=Q_MAX, **kwargs)


def simulate(speeds: dict[int, float], until: float, compass: Compass | None = None):
    """Nodes of fixed seconds per step, started at 0; each step the policy names is taken at
    once and its nodes start again. Returns the policy, the steps (time, nodes) and every
    task's (node, start, steps, group)."""
    compass = compass or policy()
    events, steps, tasks = [], [], []

    def dispatch(now: float) -> None:
        for k in list(compass.startable(0)):
            q = compass.task_settings(k, now)["local-steps"]
            compass.set_idle(k, False)
            compass.started(k, 0)
            tasks.append((k, now, q, compass._group_of.get(k)))
            heapq.heappush(events, (now + q * speeds[k], k, q))

    for k in speeds:
        compass.join(k)
        compass.set_idle(k, True)
    dispatch(0.0)
    while events and events[0][0] <= until:
        now, k, q = heapq.heappop(events)
        compass.finished(k, duration=now - compass._start[k])
        compass.set_idle(k, True)
        while (nodes := compass.take_step()) is not None:
            steps.append((now, sorted(nodes)))
        dispatch(now)
    return compass, steps, tasks


def test_a_first_task_has_the_most_steps_and_its_reply_measures_the_speed_and_steps_alone():
    compass = policy()
    compass.join(3)
    assert compass.task_settings(3, 0.0) == {"local-steps": Q_MAX}
    compass.finished(3, duration=250.0)
    assert compass.speeds == {3: 2.5}
    assert compass.steps_due() == 1 and not compass.owes(0)
    assert compass.take_step() == [3] and compass.take_step() is None and compass.owes(0)


def test_speeds_are_averaged_with_the_momentum():
    compass = policy(speed_momentum=0.5)
    compass.join(0)
    compass.task_settings(0, 0.0)
    compass.finished(0, duration=100.0)  # 1 s per step
    q = compass.task_settings(0, 100.0)["local-steps"]
    compass.finished(0, duration=3.0 * q)  # 3 s per step: s = 0.5 * 1 + 0.5 * 3
    assert compass.speeds[0] == pytest.approx(2.0)


def test_groups_arrive_together_within_their_window_and_steps_stay_in_bounds():
    speeds = {0: 1.0, 1: 1.3, 2: 1.7, 3: 2.2, 4: 3.0, 5: 4.1}
    compass, steps, tasks = simulate(speeds, until=5000.0)
    assert all(Q_MIN <= q <= Q_MAX for _, _, q, _ in tasks)
    assert len(steps) > 20
    grouped = [nodes for _, nodes in steps if len(nodes) > 1]
    assert grouped, "no group of several nodes ever formed"
    assert compass._general == []  # exact speeds: nobody is late
    arrivals = {}
    for k, start, q, group in tasks:
        if group is not None:
            arrivals.setdefault(group, []).append((k, start + q * speeds[k]))
    for members in arrivals.values():
        times = [t for _, t in members]
        slowest = max(speeds[k] for k, _ in members)
        assert max(times) - min(times) <= slowest + 1e-9  # each arrives within one of its steps


def test_a_much_slower_node_gets_the_fewest_steps_in_a_group_of_its_own():
    speeds = {0: 1.0, 1: 1.1, 2: 1.2, 3: 60.0}
    _, _, tasks = simulate(speeds, until=20000.0)
    slow = [(q, group) for k, _, q, group in tasks if k == 3 and group is not None]
    assert len(slow) >= 3 and all(q == Q_MIN for q, _ in slow)
    seen = set()
    for k, _, _, group in tasks:  # each of its tasks opens a new group: it joins none
        assert k != 3 or group is None or group not in seen
        seen.add(group)


def test_the_fastest_node_starts_first():
    compass = policy()
    for k, duration in enumerate([300.0, 100.0, 200.0]):
        compass.join(k)
        compass.set_idle(k, True)
        compass.task_settings(k, 0.0)
        compass.finished(k, duration=duration)
    compass.join(3)  # not measured yet: first, as its first task's steps are fixed
    compass.set_idle(3, True)
    assert list(compass.startable(0)) == [3, 1, 2, 0]


def _two_in_a_group() -> Compass:
    """Nodes 0 and 1 measured at 1 s per step, both in group 0 (expected at 200, deadline 300)."""
    compass = policy(latest_time_factor=2.0)
    for k in (0, 1):
        compass.join(k)
        compass.task_settings(k, 0.0)
        compass.finished(k, duration=100.0)
    while compass.take_step() is not None:
        pass
    assert compass.task_settings(0, 100.0) == compass.task_settings(1, 100.0)
    group = compass.groups[0]
    assert group.pending == [0, 1] and (group.expected, group.latest) == (200.0, 300.0)
    return compass


def test_an_arrival_in_the_window_waits_until_its_group_steps():
    compass = _two_in_a_group()
    compass.finished(0, duration=100.0)
    assert not compass.may_start(0, 0) and compass.steps_due() == 0 and compass.owes(0)
    compass.finished(1, duration=150.0)  # 250: after the expected time, within the deadline
    assert compass.take_step() == [0, 1] and compass.may_start(0, 0) and compass.may_start(1, 0)
    assert compass.groups == {}


def test_a_passed_deadline_steps_the_arrived_and_the_late_node_joins_the_next_step():
    compass = _two_in_a_group()
    compass.finished(0, duration=100.0)
    compass.join(2)
    compass.task_settings(2, 50.0)
    compass.finished(2, duration=260.0)  # 310: group 0's deadline (300) passed: it steps first
    assert compass.take_step() == [0] and compass.take_step() == [2]
    compass.finished(1, duration=400.0)  # 500: late, into the general buffer
    assert compass.steps_due() == 0 and compass.may_start(1, 0) and compass._general == [1]
    q = compass.task_settings(0, 310.0)["local-steps"]
    compass.finished(0, duration=float(q))  # a group of its own that steps with the buffer
    assert sorted(compass.take_step()) == [0, 1] and compass._general == []


def test_a_node_that_leaves_no_longer_holds_its_group_back():
    compass = _two_in_a_group()
    compass.finished(0, duration=100.0)
    compass.leave(1)
    assert compass.take_step() == [0] and compass.may_start(0, 0) and compass.groups == {}


def test_the_state_round_trips_and_the_copy_decides_alike():
    compass, _, _ = simulate({0: 1.0, 1: 1.4, 2: 2.5}, until=900.0)
    copy = policy()
    copy.load_state_dict(compass.state_dict())
    assert copy.state_dict() == compass.state_dict() and copy.bounds == compass.bounds
    for k in sorted({0, 1, 2} - compass._waiting):
        assert copy.task_settings(k, 950.0) == compass.task_settings(k, 950.0)
    assert copy.groups == compass.groups
    with pytest.raises(ValueError, match="hyperparameters"):
        policy(latest_time_factor=3.0).load_state_dict(compass.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_local_steps": 0}, "min_local_steps must be"),
        ({"min_local_steps": 50, "max_local_steps": 40}, r"max_local_steps \(40, from 40\)"),
        ({"max_local_steps": "many"}, "max_local_steps must be an integer >= 1 or 'auto'"),
        ({"speed_momentum": 0.0}, "speed_momentum must be"),
        ({"speed_momentum": 1.5}, "speed_momentum must be"),
        ({"latest_time_factor": 0.5}, "latest_time_factor must be"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        Compass(**kwargs)


def test_a_task_measured_at_no_time_keeps_a_positive_speed():
    compass = policy()
    compass.join(0)
    compass.task_settings(0, 0.0)
    compass.finished(0, duration=0.0)
    compass.take_step()
    assert compass.speeds[0] > 0 and math.isfinite(compass.speeds[0])
    assert compass.task_settings(0, 0.0) == {"local-steps": Q_MAX}


@pytest.mark.parametrize(
    ("run_settings", "bounds"),
    [
        ({"local-steps": 5}, (1, 5)),
        ({"local-steps": 40}, (8, 40)),
        ({"local-epochs": 2}, (20, 100)),
    ],
)
def test_auto_bounds_follow_the_runs_local_steps(run_settings, bounds):
    compass = Compass()
    compass.join(0)
    assert compass.task_settings(0, 0.0, run_settings) == {"local-steps": bounds[1]}
    assert compass.bounds == bounds
    assert compass.hyperparameters()["max_local_steps"] == "auto"


def test_a_given_bound_beyond_the_auto_one_is_refused_naming_both():
    compass = Compass(min_local_steps=10)
    compass.join(0)
    with pytest.raises(InvalidArgument, match=r"max_local_steps \(5, from 'auto'\)"):
        compass.task_settings(0, 0.0, {"local-steps": 5})
