"""Why a run stops: its budgets and limits, and what no single argument check sees.

A run ends when a budget is spent or a limit is met (``COMPLETED_STOPS``), or when it can make
no more progress (``FAILED_STOPS``, fl_async.strategies.result): every node left, only one
node's updates pass the guard, or no update was accepted for ``patience`` tasks in a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fl_async.aggregators import Aggregator, UpdateGuard
from fl_async.strategies.run import Run
from fl_async.validation import InvalidArgument, check_int


@dataclass(frozen=True)
class Limits:
    """``start()``'s budget (``num_rounds`` x nodes accepted updates) and limits."""

    budget: int
    max_updates: int | None = None
    max_virtual_time: float | None = None
    target: float | None = None
    """The target accuracy: an evaluation that reaches it stops the run."""

    @property
    def updates(self) -> int:
        """Accepted updates after which the run stops."""
        return self.budget if self.max_updates is None else min(self.budget, self.max_updates)


def stop_reason(
    limits: Limits,
    run: Run,
    requested: bool,
    target_metric: str,
    all_left: Callable[[], bool],
    guard: UpdateGuard,
) -> str:
    """The budget or limit that ends ``run`` now ("" to go on); ``requested``: ``should_stop``
    said yes; ``all_left()``: every node left the run (it sets the stop detail)."""
    rec = run.recorder
    if requested:
        return "should-stop"
    if rec.num_updates >= limits.updates:
        return "budget"
    if run.out_of_wall_time():
        return "max-wall-time"
    if limits.max_virtual_time is not None and run.order.now >= limits.max_virtual_time:
        return "max-virtual-time"
    if limits.target is not None and rec.reached(limits.target, target_metric):
        return "target-accuracy"
    if all_left():
        return "no-active-nodes"
    detail = guard.one_node(run.patience)
    if detail:
        run.stop_detail = detail
        return "one-node"
    if rec.since_progress >= run.patience:
        run.stop_detail = f"{rec.since_progress} tasks in a row ended without an accepted update"
        return "no-progress"
    return ""


def check_pairs(
    aggregator: object,
    clock: object,
    checkpoint_dir: object,
    checkpoint_every: object,
    eval_grid: object,
    send_ahead: object,
) -> None:
    """Refuse what no single argument check sees: a foreign aggregator, settings that need
    another one."""
    if not isinstance(aggregator, Aggregator):
        raise InvalidArgument(f"aggregator must be an fl_async Aggregator, got {aggregator!r}")
    if checkpoint_every is not None and checkpoint_dir is None:
        raise InvalidArgument("checkpoint_every needs checkpoint_dir")
    if eval_grid is not None and clock is None:
        raise InvalidArgument("eval_grid needs a clock (its times are virtual)")
    check_int("send_ahead", send_ahead, minimum=1, allow_none=True)
    if send_ahead is not None and clock is None:
        raise InvalidArgument(
            f"send_ahead={send_ahead} needs a clock: without one every task is awaited at once "
            "(real devices), so none may be held back; leave send_ahead out"
        )
