"""Receiving replies: the next one in order, turned into a client update and applied.

A reply's update is measured against the model its task started from (``base - trained``, or
the pseudo-gradient the node sent); the update guard (``fl_async.aggregators.guard``) judges
it before the rule sees it, and holds the first ones until several nodes' votes have arrived
(``GuardedApply``). A reply that is an error, cannot be read, or never comes (timeout, the node
left) counts against its node (``NodeRegistry``); so does an update the rule rejects for its
content. A reply's claims are bounded: its metrics (``protocol.MAX_METRICS``; beyond, it is
malformed) and the weight of its sample count (``NodeRegistry.weight``). Barrier rules take
their step once no update for it can still come.
"""

from __future__ import annotations

import time

import numpy as np
from flwr.app import Message, MetricRecord
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.aggregators import ClientUpdate
from fl_async.strategies.guarded import GuardedApply
from fl_async.strategies.tasks import Task

SWEEP_EVERY = 1.0
"""Seconds between pulls of every unanswered reply (at most a twentieth of the task timeout);
in between only the replies awaited next are pulled."""


class _NoReply:
    """What ``_wait_for`` returns when it stopped waiting without a reply or a timeout."""


OUT_OF_TIME = _NoReply()
"""The run's wall-time limit passed while it waited."""
UNSENT = _NoReply()
"""An awaited task could not be sent (it left the book)."""


class ReplyHandling(GuardedApply):
    """``AsyncStrategy``'s receiving side: wait, read, apply, record; failures and barriers."""

    def _next_reply(self, grid: Grid) -> bool:
        """Wait for and handle the next reply in order; return whether the server stepped."""
        version = self.aggregator.version
        if self._guard_queue:  # updates the guard judged when it opened come first
            self._apply_queued()
            self._settle_barrier()
            return self.aggregator.version > version
        wanted = self._order.wanted(self._book)
        got = self._wait_for(grid, wanted)
        if isinstance(got, _NoReply):
            return False  # the loop's next look at its limits ends the run, or it looks again
        self._check_owner()  # a run that took over while this one waited gets the update
        msg_id = self._order.overdue(self._book, wanted) if got is None else got[0]
        self._evaluate_grid(until=self._book[msg_id].finish)
        if got is None:
            self._drop(msg_id, "timeout")
        else:
            self._handle(msg_id, got[1], arrival=time.time())
        self._release_if_ready()
        self._settle_barrier()
        return self.aggregator.version > version

    def _wait_for(self, grid: Grid, wanted: list[str]) -> tuple[str, Message] | None | _NoReply:
        """The first reply among ``wanted`` with its task's key (stashing others), None when
        the oldest timed out, ``OUT_OF_TIME`` when the run's ``max_wall_time`` passed while it
        waited, ``UNSENT`` when an awaited task could not be sent. Held tasks go out as the
        outbox allows (an awaited one at once)."""
        book, interval = self._book, self.poll_interval
        while True:
            for msg_id in wanted:
                if book.stashed(msg_id):
                    return msg_id, book.take_stashed(msg_id)
            self._send(grid)
            if any(m not in book for m in wanted):
                return UNSENT
            pending = self._to_pull(wanted)
            for key, reply in self._outbox.pull(grid, pending) if pending else []:
                book.stash(key, reply)
            if any(book.stashed(m) for m in wanted):
                continue
            if time.time() - min(book[m].dispatched_wall for m in wanted) > self._timeout:
                return None
            if self._out_of_wall_time():
                return OUT_OF_TIME
            time.sleep(interval)
            # A pull is cheap next to a reply left waiting: back off to 50 ms at most.
            interval = min(interval * 1.5, 0.05)

    def _to_pull(self, wanted: list[str]) -> list[str]:
        """The replies to ask the grid for now: the awaited ones, and once per sweep every
        unanswered one, so that none waits in the SuperLink until its TTL runs out (a reply
        pulled before its turn is stashed). Listing thousands of tasks in flight on every poll
        cost the server more than anything else at 10,000 nodes. With ``send_ahead`` every sent
        task is asked for: they are few, and each reply that comes makes room for the next."""
        if self._outbox.ahead is not None:
            return self._outbox.to_pull(self._book)
        now = time.time()
        if now >= self._next_sweep:
            self._next_sweep = now + min(SWEEP_EVERY, self._timeout / 20)
            return self._book.unanswered()
        return [m for m in wanted if not self._book.stashed(m)]

    def _handle(self, msg_id: str, reply: Message, *, arrival: float) -> MetricRecord | None:
        """Turn one reply into a client update and apply it; record what happened."""
        task, base = self._close(msg_id)
        duration = self._order.closed(msg_id, task, arrival=arrival, advance=True)
        node = self._registry.get(task.node_id)
        if node is not None:
            self._registry.set_busy(node, False)
        self.guard.heard(task.stable_id)
        if reply.has_error():
            kind = protocol.UNDELIVERED.get(reply.error.code, "error")
            self._failed(task, f"error reply {reply.error.code}: {reply.error.reason}", kind)
            return None
        try:
            parsed = protocol.read_train_reply(reply)
        except ValueError as err:
            self._failed(task, str(err), "malformed")
            return None
        delta = parsed.arrays if parsed.is_pseudo_gradient else _difference(base, parsed.arrays)
        update = ClientUpdate(
            node_id=task.stable_id, delta=delta, iteration=task.iteration,
            base=base if self.aggregator.reads_base else None,  # the server's own copy: finite
            staleness=self.aggregator.version - task.base_version,
            num_examples=self._registry.weight(node, parsed.num_examples),
        )  # fmt: skip
        return self._judge(update, task, base, parsed, duration, arrival)

    def _failed(self, task: Task, why: str, kind: str) -> None:
        """``task`` ended without an update: count it against its node, which leaves the
        active set (the policy's bound stops waiting for it) until its next success."""
        self._recorder.fault(kind, f"node {task.node_id} (stable id {task.stable_id}): {why}")
        self._recorder.task_failed()
        self.guard.heard(task.stable_id)
        node = self._registry.get(task.node_id)
        if node is not None:
            self._registry.failed(node, self.aggregator.version, f"{kind}: {why}")
        self._leave(task.stable_id)

    def _drop(self, msg_id: str, kind: str) -> None:
        """Give up on a task in flight (timed out, or its node left)."""
        task, _ = self._close(msg_id)
        self._order.closed(msg_id, task, arrival=time.time(), advance=kind == "timeout")
        self._failed(task, f"task {kind}", kind)

    def _leave(self, stable_id: int) -> None:
        """A node left the active set: the policy stops counting it; the aggregator forgets it
        at once or ``forget_after`` steps later."""
        self.policy.leave(stable_id)
        if self.forget_after == 0:
            self.aggregator.forget(stable_id)
        else:
            self._forget_at[stable_id] = self.aggregator.version + self.forget_after

    def _settle_barrier(self) -> None:
        """Take a barrier rule's step once no update for it can still come."""
        while self.aggregator.held and not self._step_owed():
            if not self.aggregator.flush():
                break

    def _step_owed(self) -> bool:
        """Whether an update for the step being filled may still come: from a task in flight,
        or from an active node that has not finished its task for it (it may not have started)."""
        agg = self.aggregator
        if any(agg.joins_step(t.base_version, t.iteration) for t in self._book.tasks()):
            return True
        return self.policy.owes(agg.version)


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
