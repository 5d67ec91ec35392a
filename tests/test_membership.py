"""Membership on its own: joins and departures, a failed task, leaving, forgetting, waiting."""

import time

from loop_parts import NodeList, _identity, collaborators, make_run, step  # noqa: F401

from fl_async.aggregators import GSGM
from fl_async.scheduling import Asynchronous


def test_a_new_node_joins_the_policy_and_a_departed_ones_tasks_are_lost():
    run, policy = make_run(nodes=2)
    parts = collaborators(run, policy)
    grid = NodeList([1, 2])
    parts.dispatcher.dispatch(grid)
    seen = []
    parts.membership.on_refresh = seen.append
    grid.node_ids = [2, 3]  # node 1 left, node 3 joined
    parts.membership.refresh(grid)
    assert sorted(run.registry.nodes) == [2, 3] and policy.has_joined(3)
    assert run.recorder.faults == {"node-left": 1, "lost": 1}
    assert [t.node_id for t in run.book.tasks()] == [2]
    assert seen == [grid]  # a resumed run's saved tasks go out after each look


def test_a_failed_task_counts_against_its_node_which_leaves_the_active_set():
    run, policy = make_run(nodes=2, max_failures=2)
    parts = collaborators(run, policy, max_failures=2)
    parts.dispatcher.dispatch(NodeList([1, 2]))
    key = run.book.of_node(1)[0]
    parts.membership.drop(key, "timeout")
    assert run.recorder.faults == {"timeout": 1} and run.recorder.since_progress == 1
    assert run.registry[1].failures == 1 and not run.registry[1].retired
    assert not parts.membership.all_left()


def test_every_node_retired_is_a_stop_with_its_detail():
    run, policy = make_run(nodes=1, max_failures=1)
    parts = collaborators(run, policy, max_failures=1)
    parts.dispatcher.dispatch(NodeList([1]))
    parts.membership.drop(run.book.ids()[0], "timeout")
    assert parts.membership.all_left()
    assert "every node left the run after 1 failed tasks" in run.stop_detail


def test_forget_after_lets_the_rule_keep_a_departed_node_for_some_steps():
    run, policy = make_run(nodes=2, rule=GSGM(lr=0.1))
    membership = collaborators(run, policy, forget_after=2).membership
    step(run, node=1)
    assert run.rule.num_cached == 1
    membership.leave(1)
    assert run.forget_at == {1: 3}
    step(run, node=2)
    membership.forget_due()
    assert run.rule.num_cached == 2
    step(run, node=2)
    membership.forget_due()
    assert run.rule.num_cached == 1 and run.forget_at == {}


class NoOneStarts(Asynchronous):
    """A policy that lets no node start (as a barrier whose step no node can fill)."""

    def may_start(self, stable_id, version):
        return False


def test_waiting_with_nothing_in_flight_ends_in_deadlock_when_the_policy_lets_no_one_start():
    run, policy = make_run(nodes=2, policy=NoOneStarts())
    membership = collaborators(run, policy).membership
    stop = membership.wait_for_nodes(NodeList([1, 2]), may_start=lambda: False)
    assert stop == "deadlock" and "lets no idle node start at step 0" in run.stop_detail


def test_waiting_for_a_node_returns_once_one_may_start():
    run, policy = make_run(nodes=1)
    membership = collaborators(run, policy).membership
    assert membership.wait_for_nodes(NodeList([1]), may_start=lambda: True) == ""


def test_the_start_waits_for_min_nodes_and_says_how_many_came():
    run, policy = make_run(nodes=0)
    run.timeout = 0.05
    membership = collaborators(run, policy, min_nodes=3).membership
    start = time.time()
    try:
        membership.wait_for_min_nodes(NodeList([1, 2]))
    except TimeoutError as err:
        assert "only 2 nodes connected" in str(err) and "min_nodes=3" in str(err)
    else:
        raise AssertionError("no TimeoutError")
    assert time.time() - start < 2.0
    membership.min_nodes = 2
    membership.wait_for_min_nodes(NodeList([1, 2]))
    assert sorted(run.registry.nodes) == [1, 2]
