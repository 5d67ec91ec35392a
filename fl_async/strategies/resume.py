"""Saving a running strategy into a ``RunState`` and resuming from one, bit for bit."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord
from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.strategies.checkpoint import CheckpointError, RunState, SavedNode, SavedTask
from fl_async.strategies.tasks import Task
from fl_async.validation import InvalidArgument, check_int, check_number


class RunSnapshot:
    """``AsyncStrategy``'s checkpoints: what is saved, and how a run picks up from it."""

    def _snapshot(self) -> RunState:
        """The run's whole state now (copies of the arrays, as the rules' ``state_dict``s), with
        the saved nodes and tasks a resume still waits for. The history is the recorder's own
        tables, not copies: a save writes only their entries it has not written yet."""
        book, rec = self._book, self._recorder
        nodes = dict(self._unrestored)
        for n in self._registry.nodes.values():
            nodes[n.stable_id] = SavedNode(n.partition_id, n.num_examples, n.tasks)
        in_flight = list(self._held) + self._held_tasks()  # a resume resends the guard's held
        for t in book.tasks():
            in_flight.append(SavedTask(t.stable_id, t.base_version, t.iteration, t.task_index,
                                       t.seed, t.start, t.finish, book.base_of(t),
                                       t.base is not None))  # fmt: skip
        return RunState(
            keys=list(self._keys),
            aggregator=self.aggregator.state_dict(),
            policy=self.policy.state_dict(),
            clock=None if self.clock is None else self.clock.state_dict(),
            order=self._order.state_dict(),
            task_bases=self.task_bases.state_dict(),
            num_updates=rec.num_updates,
            num_replies=rec.num_replies,
            faults=dict(rec.faults),
            last_eval_step=rec.last_eval_step,
            train_config=dict(self._train_config),
            nodes=nodes,
            forget_at=dict(self._forget_at),
            in_flight=in_flight,
            train_metrics=rec.result.train_metrics_clientapp,
            evaluate_metrics=rec.result.evaluate_metrics_serverapp,
            grid_metrics=rec.result.evaluate_metrics_grid,
            guard=self.guard.state_dict(),
            settings={"eval_every": self._eval_every, "patience": self._patience},
            wall=rec.elapsed(),
        )

    def _save_checkpoint(self) -> None:
        self._checkpointer.save(self._snapshot(), self.aggregator.version)

    def _check_owner(self) -> None:
        """Stop (``RunSuperseded``) if another run took over the checkpoint directory."""
        if self._checkpointer is not None:
            self._checkpointer.check_owner()

    def _resume(self, grid: Grid, arrays: ArrayRecord, config: ConfigRecord | None) -> bool:
        """Pick up from the checkpoint in ``checkpoint_dir``, if there is one."""
        state = None if self._checkpointer is None else self._checkpointer.load()
        if state is None:
            return False
        self._begin(grid, arrays, config)
        self._keys = state.keys
        self.aggregator.load_state_dict(state.aggregator)
        self._keep_auto(state.aggregator.get("hyperparameters", {}))
        self._keep_settings(state.settings or {})
        self.policy.load_state_dict(state.policy)
        # Nodes admitted above that the checkpoint does not know (they joined after it, or are
        # new to the run) join the loaded policy; the others keep their saved clocks.
        for stable in self._registry.order:
            if not self.policy.has_joined(stable):
                self.policy.join(stable)
        if self.clock is not None and state.clock is not None:
            self.clock.load_state_dict(state.clock)
        self._order.load_state_dict(state.order)
        rec = self._recorder
        rec.num_updates, rec.num_replies = state.num_updates, state.num_replies
        rec.faults, rec.last_eval_step = dict(state.faults), state.last_eval_step
        rec.wall_before = _saved_wall(state.wall)
        rec.result.train_metrics_clientapp = {
            k: protocol.metric_record(v) for k, v in state.train_metrics.items()
        }
        rec.result.evaluate_metrics_serverapp = {
            k: protocol.metric_record(v) for k, v in state.evaluate_metrics.items()
        }
        rec.result.evaluate_metrics_grid = {
            k: protocol.metric_record(v) for k, v in state.grid_metrics.items()
        }
        self._grid = [(i, at) for i, at in self._grid if i not in state.grid_metrics]
        self._checkpointer.last_step = self.aggregator.version
        self._forget_at = dict(state.forget_at)
        self._unrestored = dict(state.nodes)
        self._restore_nodes()
        self.task_bases.load_state_dict(state.task_bases)
        if state.guard is not None:
            self.guard.load_state_dict(state.guard)
        self._resend(grid, state.in_flight)
        log(INFO, "Resumed from %s at server step %d", self._checkpointer.path,
            self.aggregator.version)  # fmt: skip
        return True

    def _keep_auto(self, saved: dict) -> None:
        """The "auto" hyperparameters as the run resolved them at its start (saved), not from
        the nodes back so far; a value of another type, or not finite and positive, is refused."""
        for owner, name, _ in self._auto:
            if name not in saved:
                continue
            value, kind = saved[name], type(getattr(owner, name))
            try:
                number = check_number(name, value, minimum=0, min_open=True)
            except InvalidArgument:
                number = None
            if number is None or kind(number) != number:
                raise CheckpointError(f"the checkpoint's {name}={value!r} is not a finite "
                                      f"positive {kind.__name__}")  # fmt: skip
            setattr(owner, name, kind(number))

    def _keep_settings(self, saved: dict) -> None:
        """``eval_every`` and ``patience``, where left to their defaults, as the run resolved
        them at its start (the defaults follow the number of nodes, which may be fewer at a
        resume); a saved value that is not a positive int is refused."""
        for name in ("eval_every", "patience"):
            if name not in saved or getattr(self, name) is not None:
                continue  # a value given to this run is this run's
            value = _checked(check_int, name, saved[name], "a positive int", minimum=1)
            setattr(self, f"_{name}", value)

    def _restore_nodes(self) -> None:
        """Give each saved node that is connected now its saved task count and data size."""
        for stable in list(self._unrestored):
            node_id = self._registry.node_of(stable)
            if node_id is not None:
                saved, node = self._unrestored.pop(stable), self._registry[node_id]
                node.tasks, node.num_examples = saved.tasks, saved.num_examples

    def _resend(self, grid: Grid, saved: list[SavedTask]) -> None:
        """Send the tasks that were in flight again, exactly as they were. A node that is not
        back yet (or has not told its stable id yet) gets its task once it is, within the task
        timeout; after it the task is lost."""
        self._held, self._held_until = list(saved), time.time() + self._timeout
        self._resend_held(grid)
        if self.clock is None or not self._held:
            return
        log(INFO, "Waiting up to %.0f s for the nodes of %d saved tasks: stable ids %s",
            self._timeout, len(self._held), sorted({s.stable_id for s in self._held}))  # fmt: skip
        # Replies are handled in virtual-finish order: a saved task sent once replies are being
        # handled could change the history, so a run with a clock waits for its nodes here.
        while self._held and time.time() < self._held_until and not self._out_of_wall_time():
            time.sleep(0.2)
            self._refresh_nodes(grid, every=1.0)
        if not self._out_of_wall_time():  # else the run stops at once; its checkpoint keeps them
            self._held_until = 0.0
            self._resend_held(grid)

    def _resend_held(self, grid: Grid) -> None:
        """Restore and resend what waits for nodes that are connected now (after each look at
        the grid's nodes); past the timeout the tasks left waiting are lost."""
        if not (self._held or self._unrestored):
            return
        self._restore_nodes()
        expired, waiting, sent = time.time() > self._held_until, [], False
        for s in self._held:
            node_id = self._registry.node_of(s.stable_id)
            if node_id is not None:
                self._resend_one(s, node_id)
                sent = True
            elif expired:
                self._recorder.fault("lost", f"stable id {s.stable_id} did not come back "
                                     f"within {self._timeout:.0f} s")  # fmt: skip
                self.policy.leave(s.stable_id)
            else:
                waiting.append(s)
        self._held = waiting
        if sent:
            self._send(grid)

    def _resend_one(self, s: SavedTask, node_id: int) -> None:
        """Put one saved task back in flight on ``node_id``, as it was."""
        task = Task(node_id, s.stable_id, s.base_version, s.iteration, s.task_index, s.seed,
                    s.start, s.finish, time.time(), s.base if s.own_base else None)  # fmt: skip
        config = self._task_config(s.base_version, s.seed, s.iteration)
        make = partial(protocol.train_message, node_id, self._record(s.base), config,
                       ttl=self._timeout)  # fmt: skip
        key = self._outbox.add(task, make)
        self._registry.set_busy(self._registry[node_id], True)
        self._book.add_stored(key, task, s.base)
        self._order.track(key, task)


def _saved_wall(value: object) -> float:
    """The checkpoint's wall time: a finite number of seconds >= 0 (0 when it has none)."""
    if value is None:
        return 0.0
    return _checked(check_number, "wall", value, "a finite number of seconds >= 0", minimum=0)


def _checked(check: Callable[..., Any], name: str, value: object, what: str,
             **bounds: Any) -> Any:  # fmt: skip
    """``check(name, value, **bounds)``; a value it refuses is a checkpoint that cannot be
    resumed (``CheckpointError``: "the checkpoint's NAME=VALUE is not WHAT")."""
    try:
        return check(name, value, **bounds)
    except InvalidArgument:
        raise CheckpointError(f"the checkpoint's {name}={value!r} is not {what}") from None
