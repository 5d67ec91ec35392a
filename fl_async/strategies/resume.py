"""Saving a running strategy into a ``RunState`` and resuming from one, bit for bit.

``Snapshots`` builds the checkpoint's ``RunState`` from the run and its parts, writes it
through the ``Checkpointer`` when due, and restores a run from one; the saved tasks in flight
go out again through the ``Resender``.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.aggregators import UpdateGuard
from fl_async.scheduling import DispatchPolicy, VirtualClock
from fl_async.strategies.checkpoint import (
    Checkpointer,
    CheckpointError,
    RunState,
    SavedNode,
    SavedTask,
)
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.evaluation import Boundaries
from fl_async.strategies.guarded import GuardGate
from fl_async.strategies.resend import Resender
from fl_async.strategies.run import Run
from fl_async.validation import InvalidArgument, check_int, check_number

Auto = list[tuple[object, str, Callable[[int], Any]]]
"""``(owner, attribute, rule)``: hyperparameters resolved from the node count at start (the
presets' ``"auto"``)."""


class Snapshots:
    """The run's checkpoints: what is saved, when, and how a run picks up from one.

    ``checkpointer`` None: the run keeps no checkpoint (``claim``, ``check_owner``, ``load``
    and the saves do nothing).
    """

    def __init__(
        self,
        run: Run,
        checkpointer: Checkpointer | None,
        *,
        policy: DispatchPolicy,
        clock: VirtualClock | None,
        task_bases: TaskBases,
        guard: UpdateGuard,
        gate: GuardGate,
        boundaries: Boundaries,
        resender: Resender,
    ) -> None:
        self.run, self.checkpointer = run, checkpointer
        self.policy, self.clock, self.task_bases, self.guard = policy, clock, task_bases, guard
        self.gate, self.boundaries, self.resender = gate, boundaries, resender

    def claim(self) -> None:
        """Make this run the checkpoint directory's owner (before resuming: a run still alive
        on it stops)."""
        if self.checkpointer is not None:
            self.checkpointer.claim()

    def check_owner(self) -> None:
        """Stop (``RunSuperseded``) if another run took over the checkpoint directory."""
        if self.checkpointer is not None:
            self.checkpointer.check_owner()

    def load(self) -> RunState | None:
        """The checkpoint to resume from, if there is one."""
        return None if self.checkpointer is None else self.checkpointer.load()

    def save_if_due(self) -> None:
        """Write a checkpoint when one is due at the current server step."""
        if self.checkpointer is not None and self.checkpointer.due(self.run.version):
            self.save()

    def save(self) -> None:
        """Write a checkpoint now (a run without a checkpointer writes none)."""
        if self.checkpointer is not None:
            self.checkpointer.save(self.snapshot(), self.run.version)

    def snapshot(self) -> RunState:
        """The run's whole state now (copies of the arrays, as the rules' ``state_dict``s), with
        the saved nodes and tasks a resume still waits for. The history is the recorder's own
        tables, not copies: a save writes only their entries it has not written yet."""
        run, rec = self.run, self.run.recorder
        nodes = dict(self.resender.unrestored)
        for n in run.registry.nodes.values():
            nodes[n.stable_id] = SavedNode(n.partition_id, n.num_examples, n.tasks)
        return RunState(
            keys=list(run.keys),
            aggregator=run.rule.state_dict(),
            policy=self.policy.state_dict(),
            clock=None if self.clock is None else self.clock.state_dict(),
            order=run.order.state_dict(),
            task_bases=self.task_bases.state_dict(),
            num_updates=rec.num_updates,
            num_replies=rec.num_replies,
            faults=dict(rec.faults),
            last_eval_step=rec.last_eval_step,
            train_config=dict(run.train_config),
            nodes=nodes,
            forget_at=dict(run.forget_at),
            in_flight=self._in_flight(),
            train_metrics=rec.result.train_metrics_clientapp,
            evaluate_metrics=rec.result.evaluate_metrics_serverapp,
            grid_metrics=rec.result.evaluate_metrics_grid,
            guard=self.guard.state_dict(),
            settings={"eval_every": run.eval_every, "patience": run.patience},
            wall=rec.elapsed(),
        )

    def _in_flight(self) -> list[SavedTask]:
        """The tasks a resume sends again: those still waiting for their nodes, the guard's
        held ones, and those in the book."""
        book = self.run.book
        held = list(self.resender.held) + self.gate.held_tasks()
        return held + [SavedTask.of(t, book.base_of(t)) for t in book.tasks()]

    def restore(self, state: RunState, auto: Auto, **given: int | None) -> None:
        """Put the run (begun from the nodes connected now) where ``state`` left it, but its
        tasks in flight (``Resender.resend``). ``given``: ``eval_every`` and ``patience`` as
        the strategy was given them (None: the run's resolved values are the checkpoint's)."""
        run = self.run
        run.keys = state.keys
        run.rule.load_state_dict(state.aggregator)
        _keep_auto(auto, state.aggregator.get("hyperparameters", {}))
        self._keep_settings(state.settings or {}, given)
        self.policy.load_state_dict(state.policy)
        # Nodes admitted at the start that the checkpoint does not know (they joined after it,
        # or are new to the run) join the loaded policy; the others keep their saved clocks.
        for stable in run.registry.order:
            if not self.policy.has_joined(stable):
                self.policy.join(stable)
        if self.clock is not None and state.clock is not None:
            self.clock.load_state_dict(state.clock)
        run.order.load_state_dict(state.order)
        self._restore_records(state)
        if self.checkpointer is not None:
            self.checkpointer.last_step = run.version
        run.forget_at = dict(state.forget_at)
        self.resender.unrestored = dict(state.nodes)
        self.resender.restore_nodes()
        self.task_bases.load_state_dict(state.task_bases)
        if state.guard is not None:
            self.guard.load_state_dict(state.guard)

    def _restore_records(self, state: RunState) -> None:
        """The recorder's counters and history, and the grid points still to evaluate."""
        rec = self.run.recorder
        rec.num_updates, rec.num_replies = state.num_updates, state.num_replies
        rec.faults, rec.last_eval_step = dict(state.faults), state.last_eval_step
        rec.wall_before = _saved_wall(state.wall)
        result = rec.result
        result.train_metrics_clientapp = _records(state.train_metrics)
        result.evaluate_metrics_serverapp = _records(state.evaluate_metrics)
        result.evaluate_metrics_grid = _records(state.grid_metrics)
        points = self.boundaries.points
        self.boundaries.points = [(i, at) for i, at in points if i not in state.grid_metrics]

    def resume(self, grid: Grid, state: RunState, refresh: Callable[..., None]) -> None:
        """Send the saved tasks in flight again (``refresh`` looks at the nodes while a run
        with a clock waits for theirs), and say so."""
        self.resender.resend(grid, state.in_flight, refresh)
        path = None if self.checkpointer is None else self.checkpointer.path
        log(INFO, "Resumed from %s at server step %d", path, self.run.version)

    def _keep_settings(self, saved: dict, given: dict[str, int | None]) -> None:
        """``eval_every`` and ``patience``, where left to their defaults, as the run resolved
        them at its start (the defaults follow the number of nodes, which may be fewer at a
        resume); a saved value that is not a positive int is refused."""
        for name in ("eval_every", "patience"):
            if name not in saved or given.get(name) is not None:
                continue  # a value given to this run is this run's
            value = _checked(check_int, name, saved[name], "a positive int", minimum=1)
            setattr(self.run, name, value)


def _keep_auto(auto: Auto, saved: dict) -> None:
    """The "auto" hyperparameters as the run resolved them at its start (saved), not from the
    nodes back so far; a value of another type, or not finite and positive, is refused."""
    for owner, name, _ in auto:
        if name not in saved:
            continue
        value, kind = saved[name], type(getattr(owner, name))
        try:
            number = check_number(name, value, minimum=0, min_open=True)
        except InvalidArgument:
            number = None
        if number is None or kind(number) != number:
            raise CheckpointError(
                f"the checkpoint's {name}={value!r} is not a finite positive {kind.__name__}"
            )
        setattr(owner, name, kind(number))


def _records(table: Any) -> dict:
    """A saved history table as MetricRecords, by the same keys."""
    return {k: protocol.metric_record(v) for k, v in table.items()}


def _saved_wall(value: object) -> float:
    """The checkpoint's wall time: a finite number of seconds >= 0 (0 when it has none)."""
    if value is None:
        return 0.0
    return _checked(check_number, "wall", value, "a finite number of seconds >= 0", minimum=0)


def _checked(check: Callable[..., Any], name: str, value: object, what: str, **bounds: Any) -> Any:
    """``check(name, value, **bounds)``; a value it refuses is a checkpoint that cannot be
    resumed (``CheckpointError``: "the checkpoint's NAME=VALUE is not WHAT")."""
    try:
        return check(name, value, **bounds)
    except InvalidArgument:
        raise CheckpointError(f"the checkpoint's {name}={value!r} is not {what}") from None
