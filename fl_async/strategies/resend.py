"""A resumed run's saved tasks, sent again exactly as they were once their nodes are back.

With a virtual clock the resume waits for those nodes (up to the task timeout) before it
handles any reply: a saved task sent later could change the history. Without one, a task is
sent when its node comes back, until the timeout; after it the task is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from logging import INFO

from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.scheduling import DispatchPolicy, VirtualClock
from fl_async.strategies.checkpoint import SavedNode, SavedTask
from fl_async.strategies.dispatch import Dispatcher
from fl_async.strategies.run import Run
from fl_async.strategies.tasks import Task


class Resender:
    """The saved tasks and nodes a resumed run waits for: each task is sent again, exactly as
    it was, once its node is connected; past ``held_until`` the tasks left waiting are lost."""

    def __init__(
        self,
        run: Run,
        policy: DispatchPolicy,
        dispatcher: Dispatcher,
        clock: VirtualClock | None,
    ) -> None:
        self.run, self.policy, self.dispatcher, self.clock = run, policy, dispatcher, clock
        self.held: list[SavedTask] = []
        """Saved tasks whose nodes are not back yet."""
        self.held_until = 0.0
        self.unrestored: dict[int, SavedNode] = {}
        """Saved nodes not connected yet, by stable id."""

    def restore_nodes(self) -> None:
        """Give each saved node that is connected now its saved task count and data size."""
        registry = self.run.registry
        for stable in list(self.unrestored):
            node_id = registry.node_of(stable)
            if node_id is not None:
                saved, node = self.unrestored.pop(stable), registry[node_id]
                node.tasks, node.num_examples = saved.tasks, saved.num_examples

    def resend(self, grid: Grid, saved: list[SavedTask], refresh: Callable[..., None]) -> None:
        """Send the tasks that were in flight again, exactly as they were. A node that is not
        back yet (or has not told its stable id yet) gets its task once it is, within the task
        timeout; after it the task is lost. ``refresh(grid, every=...)`` looks at the nodes."""
        run = self.run
        self.held, self.held_until = list(saved), time.time() + run.timeout
        self.resend_held(grid)
        if self.clock is None or not self.held:
            return
        log(
            INFO,
            "Waiting up to %.0f s for the nodes of %d saved tasks: stable ids %s",
            run.timeout,
            len(self.held),
            sorted({s.stable_id for s in self.held}),
        )
        # Replies are handled in virtual-finish order: a saved task sent once replies are being
        # handled could change the history, so a run with a clock waits for its nodes here.
        while self.held and time.time() < self.held_until and not run.out_of_wall_time():
            time.sleep(run.node_wait)
            refresh(grid, every=1.0)
        if not run.out_of_wall_time():  # else the run stops at once; its checkpoint keeps them
            self.held_until = 0.0
            self.resend_held(grid)

    def resend_held(self, grid: Grid) -> None:
        """Restore and resend what waits for nodes that are connected now (after each look at
        the grid's nodes); past the timeout the tasks left waiting are lost."""
        if not (self.held or self.unrestored):
            return
        self.restore_nodes()
        run = self.run
        expired, waiting, sent = time.time() > self.held_until, [], False
        for s in self.held:
            node_id = run.registry.node_of(s.stable_id)
            if node_id is not None:
                self._resend_one(s, node_id)
                sent = True
            elif expired:
                why = f"stable id {s.stable_id} did not come back within {run.timeout:.0f} s"
                run.recorder.fault("lost", why)
                self.policy.leave(s.stable_id)
            else:
                waiting.append(s)
        self.held = waiting
        if sent:
            self.dispatcher.send(grid)

    def _resend_one(self, s: SavedTask, node_id: int) -> None:
        """Put one saved task back in flight on ``node_id``, as it was."""
        run = self.run
        task = Task(
            node_id=node_id,
            stable_id=s.stable_id,
            base_version=s.base_version,
            iteration=s.iteration,
            task_index=s.task_index,
            seed=s.seed,
            start=s.start,
            finish=s.finish,
            dispatched_wall=time.time(),
            base=s.base if s.own_base else None,
        )
        settings = self.policy.settings_in_flight(s.stable_id)
        config = self.dispatcher.config_of(s.base_version, s.seed, s.iteration, settings)
        record = run.record(s.base)
        make = partial(protocol.train_message, node_id, record, config, ttl=run.timeout)
        key = run.outbox.add(task, make)
        run.registry.set_busy(run.registry[node_id], True)
        run.book.add_stored(key, task, s.base)
        run.order.track(key, task)
