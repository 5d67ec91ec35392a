"""``startable``: the idle nodes a policy lets start, read from its index, equal those that a scan
asking each idle node (and each rule as docs/algorithms.md states it) lets start."""

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fl_async.scheduling import ASP, SSP, Asynchronous, Barrier, OneStepDelay, WhiteList

POLICIES = {
    "Asynchronous": Asynchronous,
    "SSP-0": lambda: SSP(0),
    "SSP-2": lambda: SSP(2),
    "WhiteList": lambda: WhiteList(slack=1),
    "Barrier": Barrier,
    "OneStepDelay": OneStepDelay,
    "OneStepDelay-warmup": lambda: OneStepDelay(warmup_steps=3),
    "ASP": lambda: ASP(staleness_bound=1, p_min=0.6, period=2),
    "ASP-auto-period": lambda: ASP(staleness_bound=0, p_min=0.9),
}
NODES = range(7)


def reference_may_start(policy, node, version):
    """The rule of docs/algorithms.md's table, worked out from the policy's public state."""
    group = policy.group if isinstance(policy, ASP) else set(NODES)
    counted = [policy.clock(k) for k in policy.active if k in group]
    lowest = min(counted, default=None)
    if node in policy.active:
        clock = policy.clock(node)
    elif lowest is not None:
        clock = lowest
    else:  # ASP enters an empty group at the lowest active clock; the others at 0
        others = [policy.clock(k) for k in policy.active] if isinstance(policy, ASP) else []
        clock = min(others, default=0)
    if isinstance(policy, Asynchronous):
        return True
    if isinstance(policy, OneStepDelay):
        if clock < policy.warmup_steps:
            return version >= clock
        return version >= max(clock - 1, 0)
    if isinstance(policy, ASP) and node not in group:
        return True
    return lowest is None or clock - lowest <= policy.staleness_bound


def check(policy, idle, joined):
    """``startable`` equals the scan, and ``may_start`` the reference rule, at several versions."""
    for version in range(0, 12, 2):
        scan = [k for k in sorted(idle) if k in joined and policy.may_start(k, version)]
        assert list(policy.startable(version)) == scan
        for k in joined:
            assert policy.may_start(k, version) == reference_may_start(policy, k, version)


KINDS = ["join", "leave", "start", "finish", "finish", "idle", "busy", "restore", "fresh", "clear"]
events = st.lists(
    st.tuples(st.sampled_from(KINDS), st.sampled_from(NODES), st.sampled_from([0.1, 1.0, 5.0])),
    max_size=80,
)


@pytest.mark.parametrize("make", POLICIES.values(), ids=POLICIES.keys())
@settings(deadline=None, max_examples=200)
@example(first=2, script=[("finish", 0, 1.0), ("leave", 0, 1.0)], via_json=False)  # leaves ahead
@example(first=1, script=[("idle", 5, 1.0), ("join", 5, 1.0)], via_json=False)  # idle, then joins
@example(first=2, script=[("leave", 1, 1.0)] + [("finish", 0, 1.0)] * 3, via_json=False)
@example(
    first=3, script=[("finish", 0, 0.1), ("finish", 0, 0.1), ("finish", 1, 1.0)], via_json=False
)  # ASP: node 1 leaves the group while idle
@given(first=st.integers(0, len(NODES)), script=events, via_json=st.booleans())
def test_startable_equals_the_scan_over_random_histories(make, first, script, via_json):
    policy, idle, joined, saved = make(), set(range(first)), set(range(first)), []
    for k in range(first):  # a fleet that starts together, as a run does
        policy.join(k)
        policy.set_idle(k, True)
    for kind, node, duration in script:
        if kind == "join":
            policy.join(node)
            joined.add(node)
        elif kind == "idle" or (kind == "busy" and node not in joined):
            policy.set_idle(node, kind == "idle")  # unjoined nodes may be declared idle
            (idle.add if kind == "idle" else idle.discard)(node)
        elif kind == "clear":
            policy.clear_idle()
            idle.clear()
        elif kind == "restore" and saved:  # an earlier state loaded under the same idle nodes
            policy.load_state_dict(saved[node % len(saved)])
            joined = set(policy.state_dict()["clock"])
        elif kind == "fresh":  # a new policy from this one's state; the caller re-declares idle
            state = policy.state_dict()
            if via_json:
                state = json.loads(json.dumps(state))
            policy = make()
            policy.load_state_dict(state)
            for k in idle:
                policy.set_idle(k, True)
        elif node not in joined:
            continue
        elif kind == "leave":
            policy.leave(node)
        elif kind == "busy":
            policy.set_idle(node, False)
            idle.discard(node)
        elif kind == "start":
            policy.started(node, 0)
            policy.set_idle(node, False)
            idle.discard(node)
        elif kind == "finish":
            policy.set_idle(node, True)  # as the strategy: idle first, then the clock moves
            idle.add(node)
            policy.finished(node, duration=duration)
        saved.append(policy.state_dict())
        check(policy, idle, joined)


class _Untouchable(list):
    """A group of the index that must not be read."""

    def __iter__(self):
        raise AssertionError("a group of waiting nodes was read")


def test_white_list_skips_waiting_nodes_without_reading_them():
    policy = WhiteList(slack=0)
    for k in range(1000):
        policy.join(k)
        policy.set_idle(k, True)
    for k in range(999):  # every node but the last finished its task of the cycle
        policy.set_idle(k, False)
        policy.started(k, 0)
        policy.set_idle(k, True)
        policy.finished(k, duration=1.0)
    groups = policy._idle.groups  # noqa: SLF001 (the index itself is what is tested)
    waiting = groups[1]
    groups[1] = _Untouchable(waiting)
    assert list(policy.startable(0)) == [999]  # the 999 waiting nodes were not looked at
    groups[1] = waiting
    policy.set_idle(999, False)
    policy.finished(999, duration=1.0)  # the cycle closes: every node may start again
    assert list(policy.startable(1)) == list(range(999))


def test_set_idle_checks_the_node_id():
    with pytest.raises(ValueError, match="node"):
        SSP(1).set_idle(-1, True)
