"""The task book: tasks in flight, replies pulled before their turn, and the stored base models.

A task's update is measured against the model it was sent (its base), so every version that a
task in flight started from is kept until its last task returns: one copy per version, counted
by reference (docs/algorithms.md, Memory). A task may instead carry a base of its own (OD-SGD's
compensated base, docs/algorithms.md, OD-SGD).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Message

Arrays = list[np.ndarray]


@dataclass
class Task:
    """One task sent to a node and not answered yet."""

    node_id: int
    stable_id: int
    base_version: int
    iteration: int
    task_index: int
    seed: int
    start: float
    """Virtual start time with a virtual clock; wall time in real-time mode."""
    finish: float
    """Virtual finish time; ``math.inf`` in real-time mode."""
    dispatched_wall: float
    base: Arrays | None = None
    """A task-specific base model, or None for the global version ``base_version``."""


class TaskBook:
    """Tasks in flight by key (``Outbox``), in dispatch order; stashed replies; stored bases."""

    def __init__(self) -> None:
        self._in_flight: dict[str, Task] = {}
        self._stash: dict[str, Message] = {}
        self._bases: dict[int, tuple[Arrays, int]] = {}  # version -> (arrays, tasks using it)

    def __len__(self) -> int:
        return len(self._in_flight)

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._in_flight

    def __getitem__(self, msg_id: str) -> Task:
        return self._in_flight[msg_id]

    def ids(self) -> list[str]:
        """Message ids of the tasks in flight, oldest dispatch first."""
        return list(self._in_flight)

    def tasks(self) -> Iterator[Task]:
        """The tasks in flight, oldest dispatch first."""
        return iter(self._in_flight.values())

    def of_node(self, node_id: int) -> list[str]:
        """Message ids of ``node_id``'s tasks in flight."""
        return [m for m, t in self._in_flight.items() if t.node_id == node_id]

    def add(self, msg_id: str, task: Task, params: Sequence[np.ndarray]) -> None:
        """Book ``task``; keep a copy of ``params`` as its base unless its version is stored."""
        self._in_flight[msg_id] = task
        if task.base is None:
            version = task.base_version
            arrays, count = self._bases.get(version) or ([p.copy() for p in params], 0)
            self._bases[version] = (arrays, count + 1)

    def add_stored(self, msg_id: str, task: Task, base: Arrays) -> None:
        """Book a resumed ``task`` whose base version ``base`` is (restored from a checkpoint)."""
        if task.base is None and task.base_version not in self._bases:
            self._bases[task.base_version] = (base, 0)
        self.add(msg_id, task, base)

    def base_of(self, task: Task) -> Arrays:
        """The model ``task`` started from."""
        return task.base if task.base is not None else self._bases[task.base_version][0]

    def close(self, msg_id: str) -> tuple[Task, Arrays]:
        """Remove a task (answered, timed out or lost) and its stashed reply; release its base."""
        task = self._in_flight.pop(msg_id)
        self._stash.pop(msg_id, None)
        if task.base is not None:
            return task, task.base
        arrays, count = self._bases[task.base_version]
        if count <= 1:
            del self._bases[task.base_version]
        else:
            self._bases[task.base_version] = (arrays, count - 1)
        return task, arrays

    def stash(self, key: str, reply: Message) -> None:
        """Keep the reply to task ``key``, pulled before its turn."""
        self._stash[key] = reply

    def stashed(self, msg_id: str) -> bool:
        """Whether the reply to ``msg_id`` has been pulled already."""
        return msg_id in self._stash

    def take_stashed(self, msg_id: str) -> Message:
        """Hand over (and forget) the stashed reply to ``msg_id``."""
        return self._stash.pop(msg_id)

    def unanswered(self) -> list[str]:
        """Tasks in flight whose reply has not been pulled yet, oldest first."""
        return [m for m in self._in_flight if m not in self._stash]

    def abandon(self) -> None:
        """Forget every task in flight (the run is over: nothing more is awaited)."""
        self._in_flight.clear()
        self._stash.clear()
        self._bases.clear()

    @property
    def stored_bases(self) -> int:
        """Distinct base versions held for tasks in flight."""
        return len(self._bases)

    @property
    def stashed_replies(self) -> int:
        """Replies pulled before their turn."""
        return len(self._stash)
