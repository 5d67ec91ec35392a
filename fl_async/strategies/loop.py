"""The event loop's collaborators for one run, built together over its ``Run``.

Each owns one concern and is tested on its own: ``Membership`` (the nodes), ``Dispatcher`` (the
tasks that go out), ``Replies`` with its ``GuardGate`` (the replies that come back, through the
update guard), ``Boundaries`` (evaluations and ``should_stop``) and ``Snapshots`` with its
``Resender`` (checkpoints and resuming). They are made afresh for every run, as the run is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fl_async.aggregators import UpdateGuard
from fl_async.scheduling import DispatchPolicy, VirtualClock
from fl_async.strategies.checkpoint import Checkpointer
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.dispatch import Dispatcher
from fl_async.strategies.evaluation import Boundaries, EvaluateFn, ShouldStop
from fl_async.strategies.guarded import GuardGate
from fl_async.strategies.membership import Membership
from fl_async.strategies.replies import Replies
from fl_async.strategies.resend import Resender
from fl_async.strategies.resume import Snapshots
from fl_async.strategies.run import Run

if TYPE_CHECKING:
    from fl_async.strategies.async_strategy import AsyncStrategy


@dataclass(frozen=True)
class Parts:
    """What a strategy is built from and keeps across its runs: the dispatch policy, the update
    guard, the task bases and the clock (the rule is the run's: ``Run.rule``)."""

    policy: DispatchPolicy
    guard: UpdateGuard
    task_bases: TaskBases
    clock: VirtualClock | None


@dataclass(frozen=True)
class Settings:
    """The strategy's settings the collaborators read (``AsyncStrategy``'s, checked there)."""

    seed: int
    task_config: dict[str, Any]
    max_in_flight: int | None
    memory_budget: float
    min_nodes: int
    forget_after: int
    max_failures: int
    poll_interval: float
    checkpoint_dir: Path | None
    checkpoint_every: int | None

    @classmethod
    def of(cls, strategy: AsyncStrategy) -> Settings:
        """``strategy``'s settings as they stand (at the start of a run)."""
        return cls(
            seed=strategy.seed,
            task_config=strategy.task_config,
            max_in_flight=strategy.max_in_flight,
            memory_budget=strategy.memory_budget,
            min_nodes=strategy.min_nodes,
            forget_after=strategy.forget_after,
            max_failures=strategy.max_failures,
            poll_interval=strategy.poll_interval,
            checkpoint_dir=strategy.checkpoint_dir,
            checkpoint_every=strategy.checkpoint_every,
        )


@dataclass(frozen=True)
class Collaborators:
    """The collaborators of one run, sharing its ``Run``."""

    membership: Membership
    dispatcher: Dispatcher
    replies: Replies
    boundaries: Boundaries
    snapshots: Snapshots

    @property
    def gate(self) -> GuardGate:
        """The reply handling's side of the update guard."""
        return self.replies.gate


def build(
    run: Run,
    parts: Parts,
    settings: Settings,
    *,
    evaluate_fn: EvaluateFn | None,
    should_stop: ShouldStop | None,
    before_reply: Callable[[float], None],
) -> Collaborators:
    """The collaborators of ``run`` (``before_reply``: see ``Replies``)."""
    policy, guard, bases, s = parts.policy, parts.guard, parts.task_bases, settings
    dispatcher, resender, membership = _fleet_side(run, parts, settings)
    gate = GuardGate(run, policy, guard, bases, membership)
    replies = Replies(
        run,
        policy,
        membership,
        dispatcher,
        gate,
        poll_interval=s.poll_interval,
        before_reply=before_reply,
    )
    boundaries = Boundaries(run, evaluate_fn=evaluate_fn, should_stop=should_stop)
    snapshots = Snapshots(
        run,
        None if s.checkpoint_dir is None else Checkpointer(s.checkpoint_dir, s.checkpoint_every),
        policy=policy,
        clock=parts.clock,
        task_bases=bases,
        guard=guard,
        gate=gate,
        boundaries=boundaries,
        resender=resender,
    )
    return Collaborators(membership, dispatcher, replies, boundaries, snapshots)


def _fleet_side(run: Run, parts: Parts, s: Settings) -> tuple[Dispatcher, Resender, Membership]:
    """The collaborators that send tasks and follow the nodes."""
    dispatcher = Dispatcher(
        run,
        parts.policy,
        parts.task_bases,
        seed=s.seed,
        task_config=s.task_config,
        max_in_flight=s.max_in_flight,
        memory_budget=s.memory_budget,
    )
    resender = Resender(run, parts.policy, dispatcher, parts.clock)
    membership = Membership(
        run,
        parts.policy,
        parts.guard,
        min_nodes=s.min_nodes,
        forget_after=s.forget_after,
        max_failures=s.max_failures,
        on_refresh=resender.resend_held,
    )
    return dispatcher, resender, membership
