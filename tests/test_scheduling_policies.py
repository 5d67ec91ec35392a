"""Dispatch policies: the SSP bound, barriers, OD-SGD's one-step delay, ASP's group, and state."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.scheduling import (
    ASP,
    SSP,
    Asynchronous,
    Barrier,
    OneStepDelay,
    TaskQueue,
    WhiteList,
)


def active_min(policy, nodes=None):
    """The minimum clock over the active nodes (or over ``nodes`` among them), worked out apart."""
    members = policy.active if nodes is None else policy.active & nodes
    return min((policy.clock(k) for k in members), default=None)


class Fleet:
    """A tiny event loop without time: the test picks which running task finishes next."""

    def __init__(self, policy, nodes, on_start=None, server=None):
        self.policy = policy
        self.version = 0
        self.arrived = {}  # updates per iteration, for OD-SGD's server
        self.server = server or (lambda fleet, node, task: None)
        self.known = set()
        self.running = {}  # node -> task index
        self.finished = []
        self.on_start = on_start or (lambda policy, node: None)
        for k in nodes:
            self.join(k)

    def join(self, node):
        self.known.add(node)
        self.policy.join(node)
        self.dispatch()

    def dispatch(self):
        for k in sorted(self.known - set(self.running)):
            if self.policy.may_start(k, self.version):
                self.on_start(self.policy, k)
                self.running[k] = self.policy.started(k, self.version)

    def finish(self, node):
        task = self.running.pop(node)
        self.server(self, node, task)
        self.policy.finished(node, duration=1.0)
        self.finished.append(node)
        self.dispatch()

    def fail(self, node):
        del self.running[node]
        self.policy.leave(node)
        self.dispatch()


def check_ssp_start(bound):
    def check(policy, node):
        if node in policy.active:
            assert policy.clock(node) - active_min(policy) <= bound

    return check


events = st.lists(
    st.tuples(st.sampled_from(["finish", "finish", "finish", "fail", "join"]), st.integers(0, 99)),
    max_size=120,
)


@settings(deadline=None, max_examples=150)
@given(n=st.integers(1, 6), bound=st.integers(0, 3), script=events)
def test_ssp_bound_holds_over_random_histories(n, bound, script):
    fleet = Fleet(SSP(bound), range(n), on_start=check_ssp_start(bound))
    for kind, r in script:
        running = sorted(fleet.running)
        if kind == "join":
            fleet.join(r % (n + 2))  # sometimes a node never seen before
        elif kind == "finish":
            fleet.finish(running[r % len(running)])
        else:
            fleet.fail(running[r % len(running)])
        # The cached minimum agrees with a direct computation, and the fleet never deadlocks.
        assert fleet.policy._floor.min == active_min(fleet.policy)
        assert fleet.running


LOCK_STEP = {
    "Barrier": Barrier,
    "WhiteList(0)": WhiteList,
    "WhiteList(slack=0)": lambda: WhiteList(slack=0),
    "SSP(0)": lambda: SSP(0),
}


@pytest.mark.parametrize("make", LOCK_STEP.values(), ids=LOCK_STEP.keys())
@settings(deadline=None, max_examples=50)
@given(picks=st.lists(st.integers(0, 99), min_size=40, max_size=40))
def test_lock_step_runs_every_node_once_per_cycle(make, picks):
    n = 4
    fleet = Fleet(make(), range(n))
    for r in picks:
        running = sorted(fleet.running)
        fleet.finish(running[r % len(running)])
    cycles = [fleet.finished[i : i + n] for i in range(0, len(fleet.finished), n)]
    assert all(sorted(c) == list(range(n)) for c in cycles)


def test_whitelist_with_slack_decides_as_ssp():
    white, ssp = Fleet(WhiteList(slack=2), range(3)), Fleet(SSP(2), range(3))
    for r in [0, 0, 1, 0, 0, 2, 0, 0, 1, 1, 0, 2, 2, 0]:
        for fleet in (white, ssp):
            if r in fleet.running:
                fleet.finish(r)
        assert white.running == ssp.running
        assert white.policy.state_dict()["clock"] == ssp.policy.state_dict()["clock"]


def test_leave_and_join():
    policy = SSP(5)
    for k in range(3):
        policy.join(k)
    for _ in range(3):
        policy.finished(0, duration=1.0)
    policy.finished(1, duration=1.0)
    assert [policy.clock(k) for k in range(3)] == [3, 1, 0] and policy._floor.min == 0

    policy.leave(2)  # no longer counted: the minimum moves up
    assert policy.active == {0, 1} and policy._floor.min == 1
    assert policy.may_start(2, 0) and policy.started(2, 0) == 1  # a retry runs at the minimum
    policy.join(2)
    assert policy.clock(2) == 1  # rejoined at the active minimum
    policy.finished(2, duration=1.0)
    policy.join(2)  # joining an active node changes nothing
    assert policy.clock(2) == 2

    policy.leave(0)
    policy.finished(0, duration=1.0)  # success while inactive: back at the minimum (1), then +1
    assert 0 in policy.active and policy.clock(0) == 2

    for k in range(3):
        policy.leave(k)
    policy.leave(1)  # leaving twice is harmless
    policy.join(7)
    assert policy.clock(7) == 0  # nobody active: a joining node starts at 0
    policy.join(1)
    assert policy.clock(1) == 0


def test_unknown_node_is_an_error():
    policy = SSP(1)
    with pytest.raises(ValueError, match="node 4 has not joined"):
        policy.may_start(4, 0)
    with pytest.raises(ValueError, match="node 4 has not joined"):
        policy.finished(4, duration=1.0)


def test_asynchronous_always_starts():
    fleet = Fleet(Asynchronous(), range(3))
    for _ in range(10):
        fleet.finish(0)
    assert fleet.policy.clock(0) == 10 and set(fleet.running) == {0, 1, 2}


def od_sgd_server(num_nodes):
    """OD-SGD's server: step ``s`` averages iteration ``s - 1``, one buffer per iteration."""

    def server(fleet, node, task):
        fleet.arrived[task] = fleet.arrived.get(task, 0) + 1
        while fleet.arrived.get(fleet.version, 0) == num_nodes:
            fleet.version += 1

    return server


def test_one_step_delay_by_hand():
    fast, slow = 0, 1
    fleet = Fleet(OneStepDelay(), [fast, slow], server=od_sgd_server(2))
    fleet.finish(fast)
    assert fleet.running == {fast: 1, slow: 0}  # iteration 1 starts before slow's iteration 0 ends
    fleet.finish(fast)
    assert fleet.version == 0 and fast not in fleet.running  # iteration 2 needs version 1
    fleet.finish(slow)
    assert fleet.version == 1 and fleet.running == {fast: 2, slow: 1}


@settings(deadline=None, max_examples=100)
@given(n=st.integers(1, 5), picks=st.lists(st.integers(0, 99), max_size=80))
def test_one_step_delay_never_runs_two_ahead(n, picks):
    def check(policy, node):
        assert policy.clock(node) <= fleet.version + 1

    fleet = Fleet(OneStepDelay(), [], on_start=check, server=od_sgd_server(n))
    for k in range(n):
        fleet.join(k)
    for r in picks:
        running = sorted(fleet.running)
        fleet.finish(running[r % len(running)])
        assert fleet.running  # never deadlocks


def run_virtual(policy, nodes, seconds, steps, on_start=None):
    """The strategy's loop under virtual time: replies are handled in virtual finish order.

    ``seconds(node, now)`` is the duration of a task that ``node`` starts at time ``now``. Returns
    ``(time, node, clock after, group after)`` per handled reply.
    """
    queue, busy, history = TaskQueue(), {}, []

    def dispatch(now):
        for k in nodes:
            if k not in busy and policy.may_start(k, 0):
                if on_start:
                    on_start(policy, k)
                task = policy.started(k, 0)
                busy[k] = now
                queue.push(f"{k}:{task}", now + seconds(k, now), k)

    for k in nodes:
        policy.join(k)
    dispatch(0.0)
    for _ in range(steps):
        key, now = queue.pop()
        k = int(key.split(":")[0])
        policy.finished(k, duration=now - busy.pop(k))
        history.append((now, k, policy.clock(k), policy.group))
        dispatch(now)
    return history


def check_group_bound(bound):
    def check(policy, node):
        if node in policy.group and node in policy.active:
            lowest = active_min(policy, policy.group)
            assert policy.clock(node) - lowest <= bound

    return check


def test_asp_slow_node_leaves_the_group_and_returns():
    slow, recovery = 3, 200.0

    def seconds(node, now):
        return 10.0 if node == slow and now < recovery else 1.0

    policy = ASP(staleness_bound=1, p_min=0.5)
    history = run_virtual(policy, range(4), seconds, 700, on_start=check_group_bound(1))

    before = [h for h in history if h[0] < 10.0]
    assert all(slow in group for *_, group in before)  # nobody measured slow yet
    out = [t for t, _, _, group in history if slow not in group]
    assert out and out[0] <= 12.0  # left at the first recomputation after its first reply
    during = [h for h in history if 20.0 <= h[0] < recovery]
    assert all(slow not in group for *_, group in during)
    # Asynchronous, it starts freely: the fast nodes run far ahead, and it is never held.
    assert policy.durations[slow] < 2.0
    fast_at_recovery = max(c for t, k, c, _ in during if k != slow)
    slow_at_recovery = max(c for t, k, c, _ in during if k == slow)
    assert fast_at_recovery - slow_at_recovery > 100
    slow_replies = [t for t, k, _, _ in history if k == slow and t < recovery]
    assert all(b - a == 10.0 for a, b in itertools.pairwise(slow_replies))
    # Recovered, it is back in the group, its clock raised to the group's pace.
    back = [t for t, _, _, group in history if t > recovery and slow in group]
    assert back and back[0] < recovery + 20.0
    assert all(slow in group for t, *_, group in history if t > back[0])
    assert policy.clock(slow) >= active_min(policy, policy.group)
    assert max(policy.clock(k) for k in range(4)) - policy.clock(slow) <= 2


def test_asp_group_follows_ssp_while_all_are_even():
    def seconds(node, now):
        return 1.0 + 0.25 * node

    policy = ASP(staleness_bound=2, p_min=0.5, period=3)
    history = run_virtual(policy, range(5), seconds, 300, on_start=check_group_bound(2))
    assert all(group == set(range(5)) for *_, group in history)


@settings(deadline=None, max_examples=60)
@given(
    speeds=st.lists(st.floats(0.1, 20.0), min_size=2, max_size=6),
    bound=st.integers(0, 3),
    p_min=st.floats(0.05, 1.0),
    period=st.one_of(st.none(), st.integers(1, 8)),
)
def test_asp_group_keeps_the_bound(speeds, bound, p_min, period):
    nodes = range(len(speeds))

    def seconds(node, now):
        # Each node changes speed twice over the run, to move it in and out of the group.
        return speeds[node] * (1.0 + 4.0 * ((int(now) // 50 + node) % 2))

    policy = ASP(staleness_bound=bound, p_min=p_min, period=period)
    run_virtual(policy, nodes, seconds, 150, on_start=check_group_bound(bound))


# ------------------------------------------------------------------------------------- state
POLICIES = {
    "Asynchronous": Asynchronous,
    "SSP": lambda: SSP(2),
    "WhiteList": lambda: WhiteList(slack=1),
    "Barrier": Barrier,
    "OneStepDelay": OneStepDelay,
    "ASP": lambda: ASP(staleness_bound=1, p_min=0.6, period=3),
}


def drive(fleet, script):
    """Run ``script``; events on an idle fleet (OD-SGD stalls after a failure) are skipped."""
    for kind, r in script:
        running = sorted(fleet.running)
        if kind == "join":
            fleet.join(r % 6)
        elif not running:
            continue
        elif kind == "fail":
            fleet.fail(running[r % len(running)])
        else:
            node = running[r % len(running)]
            task = fleet.running.pop(node)
            fleet.server(fleet, node, task)
            fleet.policy.finished(node, duration=float(1 + (node * 7 + r) % 5))
            fleet.dispatch()


@pytest.mark.parametrize("make", POLICIES.values(), ids=POLICIES.keys())
@settings(deadline=None, max_examples=40)
@given(first=events, second=events, via_json=st.booleans())
def test_state_dict_resumes_exactly(make, first, second, via_json):
    fleet = Fleet(make(), range(4), server=od_sgd_server(4))
    drive(fleet, first)
    state = fleet.policy.state_dict()
    if via_json:
        state = json.loads(json.dumps(state))
    twin = Fleet(make(), [], server=od_sgd_server(4))
    twin.policy.load_state_dict(state)
    twin.known, twin.running, twin.version = set(fleet.known), dict(fleet.running), fleet.version
    twin.arrived = dict(fleet.arrived)
    drive(fleet, second)
    drive(twin, second)
    assert twin.running == fleet.running
    assert twin.policy.state_dict() == fleet.policy.state_dict()


def test_load_state_dict_checks_name_and_hyperparameters():
    with pytest.raises(ValueError, match="'SSP', not 'WhiteList'"):
        WhiteList(0).load_state_dict(SSP(0).state_dict())
    with pytest.raises(ValueError, match="staleness_bound"):
        SSP(1).load_state_dict(SSP(2).state_dict())


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SSP(-1), "staleness_bound must be an integer >= 0.*got -1"),
        (lambda: SSP(1.5), "staleness_bound .*got 1.5"),
        (lambda: SSP(True), "staleness_bound .*got True"),
        (lambda: WhiteList(slack=-2), "slack must be an integer >= 0.*got -2"),
        (lambda: ASP(p_min=0.0), r"p_min must be a finite number in \(0, 1\], got 0.0"),
        (lambda: ASP(p_min=1.5), r"p_min must be a finite number in \(0, 1\], got 1.5"),
        (lambda: ASP(period=0), "period must be an integer >= 1, got 0"),
        (lambda: ASP(staleness_bound=-3), "staleness_bound .*got -3"),
    ],
)
def test_bad_parameters_name_the_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_calls_name_the_value():
    policy = SSP(1)
    policy.join(0)
    with pytest.raises(ValueError, match="duration must be a finite number >= 0, got -1.0"):
        policy.finished(0, duration=-1.0)
    with pytest.raises(ValueError, match="duration .*got nan"):
        policy.finished(0, duration=float("nan"))
    with pytest.raises(ValueError, match="version must be an integer >= 0, got -1"):
        policy.may_start(0, -1)
    with pytest.raises(ValueError, match="node must be an integer >= 0, got 'a'"):
        policy.join("a")
    assert policy.clock(0) == 0  # nothing changed
