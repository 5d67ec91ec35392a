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
from flwr.app import ArrayRecord
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.strategies.nodes import Node
from fl_async.strategies.outbox import MakeMessage
from fl_async.strategies.tasks import Task


class TaskDispatch:
    """``AsyncStrategy``'s dispatch: choose nodes, make their tasks, push and book them."""

    def _dispatchable(self) -> list[int]:
        """Idle nodes the policy lets start now, by stable id (room in ``max_in_flight``)."""
        version = self.aggregator.version
        limit = self.max_in_flight
        if limit is None:
            limit = min(len(self._registry), max(1, int(self.memory_budget // self._model_bytes)))
        room = limit - len(self._book)
        chosen: list[int] = []
        if room <= 0:
            return chosen
        running = bool(self._book)
        # The policy's idle nodes are the registry's (NodeRegistry's on_idle keeps them equal):
        # it names those that may start without being asked node by node.
        for stable in self.policy.startable(version):
            node_id = self._registry.node_of(stable)
            if self._registry.may_retry(self._registry[node_id], version,
                                        anything_in_flight=running):  # fmt: skip
                chosen.append(node_id)
                room -= 1
                if room <= 0:
                    break
        return chosen

    def _dispatch(self, grid: Grid) -> bool:
        """Make a task for every node that may start one and hand it to the outbox, which
        sends it now or holds it back (``send_ahead``); return whether any task was made and
        did not fail to go."""
        made = [self._make_task(node_id) for node_id in self._dispatchable()]
        for task, make in made:
            self._track(self._outbox.add(task, make), task)
        self._send(grid)
        return bool(made) and bool(self._book)

    def _send(self, grid: Grid) -> None:
        """Let the outbox send what it may now; a task whose push failed leaves the book."""
        if not self._outbox.held:
            return
        for key in self._outbox.release(grid, self._book, self._order.wanted(self._book)):
            task, _ = self._close(key)
            self._order.closed(key, task, arrival=time.time(), advance=False)
            node = self._registry.get(task.node_id)
            if node is not None:
                self._registry.set_busy(node, False)
            self._recorder.fault("push-failed", f"node {task.node_id}: the task was not sent")

    def _close(self, key: str) -> tuple[Task, list[np.ndarray]]:
        """Take a task out of the book and the outbox (answered, timed out, lost or unsent)."""
        self._outbox.forget(key)
        return self._book.close(key)

    def _make_task(self, node_id: int) -> tuple[Task, MakeMessage]:
        """The next task for ``node_id`` and what builds its message (the node is then busy)."""
        node = self._registry[node_id]
        version = self.aggregator.version
        iteration = self.policy.started(node.stable_id, version)
        base = self.task_bases.base_for(node.stable_id, iteration, self.aggregator.params,
                                        version)  # fmt: skip
        seed = int(
            np.random.SeedSequence([self.seed, node.stable_id, node.tasks]).generate_state(1)[0]
        )
        start, finish = self._order.timing(node.stable_id, node.tasks,
                                           examples=self._examples_for(node),
                                           model_bytes=self._model_bytes)  # fmt: skip
        task = Task(node_id=node_id, stable_id=node.stable_id, base_version=version,
                    iteration=iteration, task_index=node.tasks, seed=seed, start=start,
                    finish=finish, dispatched_wall=time.time(), base=base)  # fmt: skip
        node.tasks += 1
        self._registry.set_busy(node, True)
        record = self._version_record(version) if base is None else self._record(base)
        config = self._task_config(version, seed, iteration)
        return task, partial(protocol.train_message, node_id, record, config, ttl=self._timeout)

    def _task_config(self, version: int, seed: int, iteration: int) -> dict[str, Any]:
        """A task's config: the training settings and what identifies the task."""
        return {**self._train_config, **self.task_config, "server-step": version,
                "server-round": version + 1, "task-seed": seed, "iteration": iteration}  # fmt: skip

    def _examples_for(self, node: Node) -> int:
        """Examples the next task processes: last ``num-examples`` x local epochs (or steps)."""
        config = {**self._train_config, **self.task_config}
        if int(config.get("local-steps", 0)) > 0:
            return int(config["local-steps"]) * int(config.get("batch-size", 32))
        examples = self._registry.examples(node)  # capped: a claim cannot stall the clock
        known = examples if examples is not None else 100
        return known * int(config.get("local-epochs", 1))

    def _track(self, msg_id: str, task: Task) -> None:
        self._book.add(msg_id, task, self.aggregator.params)
        self._order.track(msg_id, task)

    def _record(self, arrays: list[np.ndarray]) -> ArrayRecord:
        return protocol.to_record(self._keys, arrays)

    def _model_record(self) -> ArrayRecord:
        return self._record(self.aggregator.params)

    def _version_record(self, version: int) -> ArrayRecord:
        """The current model as an ArrayRecord, serialised once per version for all its tasks."""
        cached = self._record_cache
        if cached is None or cached[0] != version:
            cached = self._record_cache = (version, self._model_record())
        return cached[1]
