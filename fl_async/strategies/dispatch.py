"""Sending tasks: which idle nodes may start now, and the task each of them gets.

A node's task carries the model it starts from (the current version, serialised once for all
its tasks, or a base of its own from ``TaskBases``), the training settings and what identifies
the task: ``server-step``, ``task-seed`` (drawn from the run's seed, the node's stable id and its
task index) and ``iteration`` (fl_async.protocol).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.scheduling import DispatchPolicy
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.nodes import Node
from fl_async.strategies.outbox import MakeMessage
from fl_async.strategies.run import Run
from fl_async.strategies.tasks import Task


class Dispatcher:
    """Chooses the nodes that may start, makes their tasks, and hands them to the outbox.

    ``max_in_flight`` None: every node, as far as ``memory_budget`` bytes of stored bases
    allow. ``seed`` seeds every task with the node's stable id and task index.
    """

    def __init__(
        self,
        run: Run,
        policy: DispatchPolicy,
        task_bases: TaskBases,
        *,
        seed: int,
        task_config: dict[str, Any],
        max_in_flight: int | None,
        memory_budget: float,
    ) -> None:
        self.run, self.policy, self.task_bases = run, policy, task_bases
        self.seed, self.task_config = seed, task_config
        self.max_in_flight, self.memory_budget = max_in_flight, memory_budget
        self._record_cache: tuple[int, ArrayRecord] | None = None
        """The current version's ArrayRecord, serialised once for all its tasks."""

    def dispatchable(self) -> list[int]:
        """Idle nodes the policy lets start now, by node id (room in ``max_in_flight``)."""
        run = self.run
        limit = self.max_in_flight
        if limit is None:
            limit = min(len(run.registry), max(1, int(self.memory_budget // run.model_bytes)))
        room = limit - len(run.book)
        chosen: list[int] = []
        if room <= 0:
            return chosen
        running = bool(run.book)
        # The policy's idle nodes are the registry's (NodeRegistry's on_idle keeps them equal):
        # it names those that may start without being asked node by node.
        for stable in self.policy.startable(run.version):
            node_id = run.registry.node_of(stable)
            node = run.registry[node_id]
            if run.registry.may_retry(node, run.version, anything_in_flight=running):
                chosen.append(node_id)
                room -= 1
                if room <= 0:
                    break
        return chosen

    def dispatch(self, grid: Grid) -> bool:
        """Make a task for every node that may start one and hand it to the outbox, which
        sends it now or holds it back (``send_ahead``); return whether any task was made and
        did not fail to go."""
        made = [self.make_task(node_id) for node_id in self.dispatchable()]
        for task, make in made:
            self.track(self.run.outbox.add(task, make), task)
        self.send(grid)
        return bool(made) and bool(self.run.book)

    def configure(self) -> list[Message]:
        """Flower's ``configure_train``: the messages of a task for every node that may start
        one, booked under ``configured-<node id>`` (at most one task per node)."""
        made = [self.make_task(node_id) for node_id in self.dispatchable()]
        for task, _ in made:
            self.track(f"configured-{task.node_id}", task)
        return [make() for _, make in made]

    def send(self, grid: Grid) -> None:
        """Let the outbox send what it may now; a task whose push failed leaves the book."""
        run = self.run
        if not run.outbox.held:
            return
        for key in run.outbox.release(grid, run.book, run.order.wanted(run.book)):
            task, _ = run.close(key)
            run.order.closed(key, task, arrival=time.time(), advance=False)
            node = run.registry.get(task.node_id)
            if node is not None:
                run.registry.set_busy(node, False)
            run.recorder.fault("push-failed", f"node {task.node_id}: the task was not sent")

    def make_task(self, node_id: int) -> tuple[Task, MakeMessage]:
        """The next task for ``node_id`` and what builds its message (the node is then busy)."""
        run = self.run
        node = run.registry[node_id]
        version = run.version
        iteration = self.policy.started(node.stable_id, version)
        base = self.task_bases.base_for(node.stable_id, iteration, run.rule.params, version)
        seed = int(
            np.random.SeedSequence([self.seed, node.stable_id, node.tasks]).generate_state(1)[0]
        )
        own = self.training_settings()
        settings = self.policy.task_settings(node.stable_id, run.order.dispatch_time(), own)
        examples = self.examples_for(node, settings)
        start, finish = run.order.timing(
            node.stable_id, node.tasks, examples=examples, model_bytes=run.model_bytes
        )
        task = Task(
            node_id=node_id,
            stable_id=node.stable_id,
            base_version=version,
            iteration=iteration,
            task_index=node.tasks,
            seed=seed,
            start=start,
            finish=finish,
            dispatched_wall=time.time(),
            base=base,
        )
        node.tasks += 1
        run.registry.set_busy(node, True)
        record = self.version_record(version) if base is None else run.record(base)
        config = self.config_of(version, seed, iteration, settings)
        return task, partial(protocol.train_message, node_id, record, config, ttl=run.timeout)

    def config_of(
        self, version: int, seed: int, iteration: int, settings: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A task's config: the training settings (the policy's ``settings`` last) and what
        identifies the task."""
        return {
            **self.training_settings(settings),
            "server-step": version,
            "server-round": version + 1,
            "task-seed": seed,
            "iteration": iteration,
        }

    def training_settings(self, settings: dict[str, Any] | None = None) -> dict[str, Any]:
        """A task's training settings: the run's, the preset's own (``task_config``) over them,
        and the policy's ``settings`` last."""
        return {**self.run.train_config, **self.task_config, **(settings or {})}

    def examples_for(self, node: Node, settings: dict[str, Any] | None = None) -> int:
        """Examples the next task processes: last ``num-examples`` x local epochs (or local
        steps x batch size), the policy's ``settings`` over the run's."""
        config = self.training_settings(settings)
        if int(config.get("local-steps", 0)) > 0:
            return int(config["local-steps"]) * int(config.get("batch-size", 32))
        examples = self.run.registry.examples(node)  # capped: a claim cannot stall the clock
        known = examples if examples is not None else 100
        return known * int(config.get("local-epochs", 1))

    def track(self, key: str, task: Task) -> None:
        """Book ``task`` as in flight under ``key``, its base the current model."""
        self.run.book.add(key, task, self.run.rule.params)
        self.run.order.track(key, task)

    def version_record(self, version: int) -> ArrayRecord:
        """The current model as an ArrayRecord, serialised once per version for all its tasks."""
        cached = self._record_cache
        if cached is None or cached[0] != version:
            cached = self._record_cache = (version, self.run.model_record())
        return cached[1]
