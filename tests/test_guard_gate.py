"""The guard gate on its own: updates held until the guard's quorum, judged together when it
opens, applied one per step; a held task saved as in flight; a refused update not counted
against its node."""

import time

from loop_parts import NodeList, _identity, answer, collaborators, make_run  # noqa: F401

from fl_async.aggregators import UpdateGuard


def guarded(nodes=3, quorum=3):
    run, policy = make_run(nodes=nodes)
    guard = UpdateGuard(factor=3.0, quorum=quorum)
    guard.begin(nodes)
    parts = collaborators(run, policy, guard=guard)
    grid = NodeList(range(1, nodes + 1))
    parts.dispatcher.dispatch(grid)
    return run, parts, grid.pushed


def test_updates_are_held_until_the_quorum_then_applied_one_per_step():
    run, parts, pushed = guarded()
    gate = parts.gate
    for key, message in zip(run.book.ids(), pushed, strict=True):
        assert parts.replies.handle(key, answer(message), arrival=time.time()) is None
        assert run.registry[message.metadata.dst_node_id].busy  # no new task while held
    assert len(gate.held) == 3 and run.version == 0
    assert [s.stable_id for s in gate.held_tasks()] == [1, 2, 3]  # saved as in flight
    gate.release_if_ready()
    assert gate.held == [] and len(gate.queue) == 3 and gate.draining()
    records = [gate.apply_queued() for _ in range(3)]
    assert run.version == 3 and [r["staleness"] for r in records] == [0, 1, 2]
    assert not gate.draining() and all(not run.registry[n].busy for n in (1, 2, 3))


def test_the_guard_opens_when_no_node_may_still_vote():
    run, parts, pushed = guarded(nodes=3)
    key = run.book.ids()[0]
    parts.replies.handle(key, answer(pushed[0]), arrival=time.time())
    parts.gate.release_if_ready()
    assert len(parts.gate.held) == 1  # nodes 2 and 3 may still vote
    for node_id in (2, 3):
        run.registry[node_id].retired = True
    for other in run.book.ids():
        run.close(other)
    parts.gate.release_if_ready()
    assert parts.gate.held == [] and len(parts.gate.queue) == 1


def test_a_refused_update_is_not_held_against_its_node():
    run, parts, pushed = guarded(nodes=3, quorum=3)
    for key, message in zip(run.book.ids(), pushed, strict=True):
        parts.replies.handle(key, answer(message, target=0.1), arrival=time.time())
    parts.gate.release_if_ready()
    while parts.gate.queue:
        parts.gate.apply_queued()
    grid = NodeList([1, 2, 3])
    parts.dispatcher.dispatch(grid)
    key = run.book.of_node(1)[0]
    record = parts.replies.handle(key, answer(grid.pushed[0], target=1e6), arrival=time.time())
    assert not record["accepted"] and run.rule.num_rejected
    assert run.registry[1].strikes == 0 and not run.registry[1].retired
