"""Receiving replies: the next one in order, turned into a client update and applied.

A reply's update is measured against the model its task started from (``base - trained``, or
the pseudo-gradient the node sent); the update guard (``fl_async.aggregators.guard``) judges
it before the rule sees it, and holds the first ones until several nodes' votes have arrived
(``GuardGate``). A reply that is an error, cannot be read, or never comes (timeout, the node
left) counts against its node (``NodeRegistry``); so does an update the rule rejects for its
content. A reply's claims are bounded: its metrics (``protocol.MAX_METRICS``; beyond, it is
malformed) and the weight of its sample count (``NodeRegistry.weight``). Barrier rules take
their step once no update for it can still come.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import Message, MetricRecord
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.aggregators import ClientUpdate
from fl_async.scheduling import DispatchPolicy
from fl_async.strategies.dispatch import Dispatcher
from fl_async.strategies.guarded import GuardGate
from fl_async.strategies.membership import Membership
from fl_async.strategies.run import Run

SWEEP_EVERY = 1.0
"""Seconds between pulls of every unanswered reply (at most a twentieth of the task timeout);
in between only the replies awaited next are pulled."""
BACKOFF_CAP = 0.05
"""Seconds: the longest wait between pulls that the back-off reaches by itself; a
``poll_interval`` above it is kept as it is."""


class _NoReply:
    """What ``_wait_for`` returns when it stopped waiting without a reply or a timeout."""


OUT_OF_TIME = _NoReply()
"""The run's wall-time limit passed while it waited."""
UNSENT = _NoReply()
"""An awaited task could not be sent (it left the book)."""


class Replies:
    """Waits for the next reply in order, turns it into a client update and applies it through
    the guard (``gate``); failures count against their nodes (``membership``); barrier rules
    step once no update for their step can come.

    ``before_reply(finish)`` runs before each reply or timeout is handled, ``finish`` its task's
    virtual finish (the strategy checks it still owns its checkpoint and evaluates the grid
    points before it). ``poll_interval``: seconds between pulls, at first; the wait grows 1.5
    times a pull up to ``BACKOFF_CAP`` (or ``poll_interval`` where that is longer).
    """

    def __init__(
        self,
        run: Run,
        policy: DispatchPolicy,
        membership: Membership,
        dispatcher: Dispatcher,
        gate: GuardGate,
        *,
        poll_interval: float,
        before_reply: Callable[[float], None],
    ) -> None:
        self.run, self.policy, self.membership = run, policy, membership
        self.dispatcher, self.gate = dispatcher, gate
        self.poll_interval, self.before_reply = poll_interval, before_reply
        self._next_sweep = 0.0  # the first pull asks for every reply in flight

    def next(self, grid: Grid) -> bool:
        """Wait for and handle the next reply in order; return whether the server stepped."""
        run = self.run
        version = run.version
        if self.gate.queue:  # updates the guard judged when it opened come first
            self.gate.apply_queued()
            self.settle_barrier()
            return run.version > version
        wanted = run.order.wanted(run.book)
        got = self._wait_for(grid, wanted)
        if isinstance(got, _NoReply):
            return False  # the loop's next look at its limits ends the run, or it looks again
        key = run.order.overdue(run.book, wanted) if got is None else got[0]
        self.before_reply(run.book[key].finish)
        if got is None:
            self.membership.drop(key, "timeout")
        else:
            self.handle(key, got[1], arrival=time.time())
        self.gate.release_if_ready()
        self.settle_barrier()
        return run.version > version

    def _wait_for(self, grid: Grid, wanted: list[str]) -> tuple[str, Message] | None | _NoReply:
        """The first reply among ``wanted`` with its task's key (stashing others), None when
        the oldest timed out, ``OUT_OF_TIME`` when the run's ``max_wall_time`` passed while it
        waited, ``UNSENT`` when an awaited task could not be sent. Held tasks go out as the
        outbox allows (an awaited one at once)."""
        run, book, interval = self.run, self.run.book, self.poll_interval
        while True:
            for key in wanted:
                if book.stashed(key):
                    return key, book.take_stashed(key)
            self.dispatcher.send(grid)
            if any(m not in book for m in wanted):
                return UNSENT
            pending = self._to_pull(wanted)
            for key, reply in run.outbox.pull(grid, pending) if pending else []:
                book.stash(key, reply)
            if any(book.stashed(m) for m in wanted):
                continue
            if time.time() - min(book[m].dispatched_wall for m in wanted) > run.timeout:
                return None
            if run.out_of_wall_time():
                return OUT_OF_TIME
            time.sleep(interval)
            # A pull is cheap next to a reply left waiting: back off to 50 ms at most, or to
            # poll_interval where that is longer (it was undone after the first wait before).
            interval = min(interval * 1.5, max(self.poll_interval, BACKOFF_CAP))

    def _to_pull(self, wanted: list[str]) -> list[str]:
        """The replies to ask the grid for now: the awaited ones, and once per sweep every
        unanswered one, so that none waits in the SuperLink until its TTL runs out (a reply
        pulled before its turn is stashed). Listing thousands of tasks in flight on every poll
        cost the server more than anything else at 10,000 nodes. With ``send_ahead`` every sent
        task is asked for: they are few, and each reply that comes makes room for the next."""
        run = self.run
        if run.outbox.ahead is not None:
            return run.outbox.to_pull(run.book)
        now = time.time()
        if now >= self._next_sweep:
            self._next_sweep = now + min(SWEEP_EVERY, run.timeout / 20)
            return run.book.unanswered()
        return [m for m in wanted if not run.book.stashed(m)]

    def handle(self, key: str, reply: Message, *, arrival: float) -> MetricRecord | None:
        """Turn one reply into a client update and apply it; record what happened."""
        run = self.run
        task, base = run.close(key)
        duration = run.order.closed(key, task, arrival=arrival, advance=True)
        node = run.registry.get(task.node_id)
        if node is not None:
            run.registry.set_busy(node, False)
        self.gate.guard.heard(task.stable_id)
        if reply.has_error():
            kind = protocol.UNDELIVERED.get(reply.error.code, "error")
            why = f"error reply {reply.error.code}: {reply.error.reason}"
            self.membership.failed(task, why, kind)
            return None
        try:
            parsed = protocol.read_train_reply(reply)
        except ValueError as err:
            self.membership.failed(task, str(err), "malformed")
            return None
        delta = parsed.arrays if parsed.is_pseudo_gradient else _difference(base, parsed.arrays)
        update = ClientUpdate(
            node_id=task.stable_id,
            delta=delta,
            iteration=task.iteration,
            base=base if run.rule.reads_base else None,  # the server's own copy: finite
            staleness=run.version - task.base_version,
            num_examples=run.registry.weight(node, parsed.num_examples),
        )
        return self.gate.judge(update, task, base, parsed, duration, arrival)

    def handle_all(self, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower's ``aggregate_train``: apply each reply (to a task of the loop's or of
        ``Dispatcher.configure``'s) and every update the guard then opens to; the last record."""
        run, gate = self.run, self.gate
        last: MetricRecord | None = None
        for reply in replies:
            key = reply.metadata.reply_to_message_id
            if key not in run.book:
                key = f"configured-{reply.metadata.src_node_id}"
            if key not in run.book:
                run.recorder.fault("unknown-reply", f"a reply to unknown message {key!r}")
                continue
            last = self.handle(key, reply, arrival=time.time())
        gate.release_if_ready()
        while gate.queue:
            last = gate.apply_queued()
            self.settle_barrier()
        self.settle_barrier()
        return last

    def settle_barrier(self) -> None:
        """Take a barrier rule's step once no update for it can still come."""
        while self.run.rule.held and not self._step_owed():
            if not self.run.rule.flush():
                break

    def _step_owed(self) -> bool:
        """Whether an update for the step being filled may still come: from a task in flight,
        or from an active node that has not finished its task for it (it may not have started)."""
        rule = self.run.rule
        if any(rule.joins_step(t.base_version, t.iteration) for t in self.run.book.tasks()):
            return True
        return self.policy.owes(rule.version)


def _difference(base: list[np.ndarray], trained: list[np.ndarray]) -> list[np.ndarray]:
    """``base - trained`` per array; arrays that do not match are passed on for rejection."""
    if len(base) != len(trained) or any(
        b.shape != t.shape or (b.dtype.kind == "f") != (t.dtype.kind == "f")
        for b, t in zip(base, trained, strict=False)
    ):
        return trained
    with np.errstate(all="ignore"):
        # In place into the freshly decoded arrays where possible: no allocation per reply.
        return [
            np.subtract(b, t, out=t) if t.flags.writeable and t.dtype == b.dtype else b - t
            for b, t in zip(base, trained, strict=True)
        ]
