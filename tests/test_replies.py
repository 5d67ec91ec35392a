"""Reply handling on its own: a reply becomes a client update, an error or a malformed reply
counts against its node, a barrier steps once nothing can join it, Flower's batch of replies."""

import time

import numpy as np
from loop_parts import (  # noqa: F401
    DIM,
    NodeList,
    _identity,
    answer,
    collaborators,
    error_reply,
    make_run,
)

from fl_async.aggregators import SSGD
from fl_async.scheduling import Barrier, VirtualClock


def dispatched(nodes=2, **kwargs):
    """A run whose nodes each got a task, its collaborators and the messages pushed."""
    run, policy = make_run(nodes=nodes, **kwargs)
    parts = collaborators(run, policy)
    grid = NodeList(range(1, nodes + 1))
    parts.dispatcher.dispatch(grid)
    return run, parts, grid.pushed


def test_a_reply_is_applied_as_base_minus_trained_and_recorded():
    run, parts, pushed = dispatched()
    key = run.book.ids()[0]
    reply = answer(pushed[0], target=1.0)
    trained = reply.content.array_records["arrays"].to_numpy_ndarrays()[0]
    record = parts.replies.handle(key, reply, arrival=time.time())
    assert run.version == 1 and record["accepted"] and record["staleness"] == 0
    assert np.allclose(run.rule.params[0], 0.5 * trained)  # ASGD, lr 0.5: w - lr (w - trained)
    assert record["node-id"] == 1 and record["server-step"] == 1
    assert key not in run.book and not run.registry[1].busy


def test_an_error_reply_and_a_malformed_one_count_against_their_nodes():
    run, parts, pushed = dispatched()
    first, second = run.book.ids()
    assert parts.replies.handle(first, error_reply(pushed[0]), arrival=time.time()) is None
    malformed = answer(pushed[1], mode="no_arrays")
    assert parts.replies.handle(second, malformed, arrival=time.time()) is None
    assert run.version == 0 and run.recorder.faults == {"error": 1, "malformed": 1}
    assert run.registry[1].failures == 1 and run.registry[2].failures == 1


def test_next_waits_in_virtual_finish_order_and_gives_up_on_the_overdue():
    clock = VirtualClock(seed=0)
    run, policy = make_run(nodes=2, clock=clock)
    seen = []
    parts = collaborators(run, policy, clock=clock, before_reply=seen.append)
    run.timeout = 0.01  # nothing answers: the earliest-finishing task times out
    parts.dispatcher.dispatch(NodeList([1, 2]))
    first = min(run.book.tasks(), key=lambda t: t.finish)
    assert not parts.replies.next(NodeList([1, 2]))
    assert seen == [first.finish] and run.recorder.faults == {"timeout": 1}
    assert [t.node_id for t in run.book.tasks()] != [first.node_id]


def test_a_barrier_steps_once_no_update_for_it_can_still_come():
    run, parts, pushed = dispatched(rule=SSGD(lr=1.0), policy=Barrier())
    keys = run.book.ids()
    parts.replies.handle(keys[0], answer(pushed[0]), arrival=time.time())
    parts.replies.settle_barrier()
    assert run.version == 0 and run.rule.held == 1  # node 2's task joins the step
    parts.replies.handle(keys[1], answer(pushed[1]), arrival=time.time())
    parts.replies.settle_barrier()
    assert run.version == 1 and run.rule.held == 0


def test_flowers_batch_of_replies_is_applied_by_node_and_an_unknown_one_is_a_fault():
    run, policy = make_run(nodes=2)
    parts = collaborators(run, policy)
    messages = parts.dispatcher.configure()
    stranger = answer(messages[0])
    stranger.metadata.__dict__["_src_node_id"] = 99
    stranger.metadata.__dict__["_reply_to_message_id"] = "nobody"
    replies = [answer(m) for m in messages]
    for reply, m in zip(replies, messages, strict=True):
        reply.metadata.__dict__["_src_node_id"] = m.metadata.dst_node_id
    last = parts.replies.handle_all([*replies, stranger])
    assert run.version == 2 and last["server-step"] == 2
    assert run.recorder.faults == {"unknown-reply": 1}
    assert run.rule.params[0].shape == (DIM,)
