"""Applying an update through the update guard (``fl_async.aggregators.guard``).

Until votes from a quorum of distinct nodes have arrived, each update is held with what its
reply said, and its node stays busy (no new task, so one fast node cannot fill the quorum
alone). Once the quorum is met, or no task in flight can bring another node's vote, the guard
opens: the held updates are judged together and applied in arrival order. A held update's
task counts as in flight in a checkpoint: a resume sends it again and gets the same reply.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from flwr.app import MetricRecord

from fl_async.aggregators import ClientUpdate, Outcome, UpdateGuard
from fl_async.aggregators.guard import REFUSALS, Verdict
from fl_async.aggregators.guard_reference import clip
from fl_async.protocol import Reply
from fl_async.scheduling import DispatchPolicy
from fl_async.strategies.checkpoint import SavedTask
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.membership import Membership
from fl_async.strategies.run import Run
from fl_async.strategies.tasks import Task

_NOT_THE_NODES_FAULT = frozenset({"too-stale", "duplicate"})
"""Rejections caused by timing, not by what the node sent: they do not count against it."""


@dataclass(frozen=True)
class HeldReply:
    """An update the guard holds until its quorum, with what is needed to apply it later."""

    task: Task
    base: list[np.ndarray]
    """The model the task started from (a checkpoint sends the task again with it)."""
    update: ClientUpdate
    norm: float
    reply: Reply
    duration: float
    arrival: float
    """The wall time the reply came at (its record's ``wall-time``)."""
    cosine: float | None = None
    """Its cosine with the guard's reference update of its base (None: not judged by one)."""


class GuardGate:
    """Holds, opens and applies judged updates: the reply handling's side of the guard."""

    def __init__(
        self,
        run: Run,
        policy: DispatchPolicy,
        guard: UpdateGuard,
        task_bases: TaskBases,
        membership: Membership,
    ) -> None:
        self.run, self.policy, self.guard = run, policy, guard
        self.task_bases, self.membership = task_bases, membership
        self.held: list[HeldReply] = []
        """Updates held until the guard opens, in arrival order."""
        self.queue: list[HeldReply] = []
        """Updates judged when the guard opened, applied one per step (evaluations and
        checkpoints come between them as between any steps); no task goes out while they wait,
        on the model they are about to change."""

    def judge(
        self,
        update: ClientUpdate,
        task: Task,
        base: list[np.ndarray],
        reply: Reply,
        duration: float,
        arrival: float,
    ) -> MetricRecord | None:
        """Hold ``update`` while the guard waits for its quorum, else apply it as judged."""
        verdict = self.guard.take_queued(update.node_id)  # judged at the opening: a resume
        if verdict is None:
            verdict = self.guard.check(update, self.run.rule.params, (base, task.base_version))
        if not verdict.hold:
            return self._conclude(update, verdict, task, reply, duration, arrival)
        held = HeldReply(task, base, update, verdict.norm, reply, duration, arrival, verdict.cosine)
        self.held.append(held)
        node = self.run.registry.get(task.node_id)
        if node is not None:
            self.run.registry.set_busy(node, True)  # no new task until the guard opens
        return None

    def release_if_ready(self) -> None:
        """Open the guard once the quorum is met or no node may still bring a vote: each
        one in the run or with a task in flight has answered."""
        held = [h.update.node_id for h in self.held]
        may_vote = {t.stable_id for t in self.run.book.tasks()}
        may_vote.update(n.stable_id for n in self.run.registry.nodes.values() if not n.retired)
        if held and self.guard.ready(held, may_vote):
            self.open()

    def open(self) -> bool:
        """Judge the held updates together; they are applied one per step (``apply_queued``).
        Whether any was held."""
        held, self.held = self.held, []
        if held:
            self.guard.open([(h.update, h.norm) for h in held], [h.cosine for h in held])
            self.queue.extend(held)
        return bool(held)

    def draining(self) -> bool:
        """Whether updates judged at the guard's opening wait to be applied: here, or, in a
        resumed run, as tasks sent again (given up once no task is in flight)."""
        if self.guard.queued and not self.queue and not self.run.book:
            self.guard.drop_queued()
        return bool(self.guard.queued)

    def apply_queued(self) -> MetricRecord:
        """Apply the next update judged when the guard opened."""
        h = self.queue.pop(0)
        verdict = self.guard.take_queued(h.update.node_id)
        node = self.run.registry.get(h.task.node_id)
        if node is not None:
            self.run.registry.set_busy(node, False)
        update = replace(h.update, staleness=self.run.version - h.task.base_version)
        return self._conclude(update, verdict, h.task, h.reply, h.duration, h.arrival)

    def held_tasks(self) -> list[SavedTask]:
        """The tasks of the held and queued updates, as tasks in flight for a checkpoint (the
        guard's state keeps the queued ones' verdicts)."""
        return [SavedTask.of(h.task, h.base) for h in self.queue + self.held]

    def _conclude(
        self,
        update: ClientUpdate,
        verdict: Verdict,
        task: Task,
        reply: Reply,
        duration: float,
        arrival: float,
    ) -> MetricRecord:
        """Apply ``update`` as the guard judged it; the node's and the rule's bookkeeping; the
        reply's record (its ``virtual-time``: now, when it is applied)."""
        outcome = self._apply_judged(update, verdict, task)
        self.policy.finished(task.stable_id, duration=duration)
        self._tell_node(task, update, outcome)
        run, norm = self.run, verdict.norm
        values = {
            **reply.metrics,
            "server-step": run.version,
            "node-id": task.node_id,
            "stable-id": task.stable_id,
            "staleness": update.staleness,
            "iteration": task.iteration,
            "virtual-time": run.order.now,
            "wall-time": run.recorder.wall_at(arrival),
            **({} if norm is None else {"update-norm": norm}),
            **({} if verdict.cosine is None else {"reference-cosine": verdict.cosine}),
            **({"guard-scale": verdict.scale} if verdict.doubted else {}),
        }
        return run.recorder.reply(values, accepted=outcome.accepted)

    def _tell_node(self, task: Task, update: ClientUpdate, outcome: Outcome) -> None:
        """The registry's, the task bases', the rule's and the guard's bookkeeping of a node
        whose update met ``outcome``."""
        registry = self.run.registry
        node = registry.get(task.node_id)
        if node is not None:
            registry.answered(node, update.num_examples, accepted=outcome.accepted)
        if outcome.accepted:
            self.task_bases.accepted(task.stable_id, update.delta)
        elif outcome.reason in REFUSALS:
            # Not counted against the node: honest nodes meet the guard too (a local training
            # that spiked once), and a run where nothing passes stops with no-progress, one
            # where one node alone passes with one-node. Its last accepted update leaves the
            # rule's cache (GSGM, MIFA, CA2FL): an update out of line may have grown through
            # it. Its next accepted one comes back.
            self.run.rule.forget(task.stable_id)
        elif node is not None and outcome.reason not in _NOT_THE_NODES_FAULT:
            if registry.rejected(node, f"update rejected: {outcome.reason}"):
                self.membership.leave(task.stable_id)
        refused = outcome.reason in REFUSALS
        self.guard.note(task.stable_id, accepted=outcome.accepted, refused=refused)

    def _apply_judged(self, update: ClientUpdate, verdict: Verdict, task: Task) -> Outcome:
        """Hand ``update`` to the rule unless the guard refused it; clipped first where the
        guard says so (a ``clipped`` fault)."""
        if verdict.refused:
            return self.run.rule.refuse(update, verdict.reason)
        if verdict.scale < 1.0 and not verdict.doubted:  # a doubted update is no fault of size
            self.run.recorder.fault(
                "clipped",
                f"node {task.node_id} (stable id {task.stable_id}): "
                f"update norm scaled by {verdict.scale:.3g}",
            )
        if verdict.scale < 1.0:
            update = replace(update, delta=clip(update.delta, verdict.scale))
        outcome = self.run.rule.apply(update)
        if outcome.accepted:
            self.guard.accepted(verdict, update.delta)
        return outcome
