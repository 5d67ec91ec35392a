"""The tasks in flight, in virtual finish order (docs/algorithms.md, Virtual clock)."""

from __future__ import annotations

import heapq

from fl_async.validation import InvalidArgument, check_int, check_number

_Entry = tuple[float, int, int, str]  # (finish, stable_id, push order, task_key): the sort key


class TaskQueue:
    """In-flight tasks ordered by virtual finish time; ties by stable id, then by push order.

    A binary heap with lazy deletion: ``push``, ``pop`` and ``remove`` cost O(log n) amortised.
    """

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live: dict[str, _Entry] = {}
        self._pushed = 0

    def push(self, task_key: str, finish: float, stable_id: int) -> None:
        """Queue ``task_key`` of node ``stable_id``, ending at virtual time ``finish`` (seconds)."""
        if not isinstance(task_key, str):
            raise InvalidArgument(f"task_key must be a str, got {task_key!r}")
        if task_key in self._live:
            raise InvalidArgument(f"task {task_key!r} is already queued")
        entry = (
            check_number("finish", finish, minimum=0),
            check_int("stable_id", stable_id, minimum=0),
            self._pushed,
            task_key,
        )
        self._pushed += 1
        self._live[task_key] = entry
        heapq.heappush(self._heap, entry)

    def peek(self) -> tuple[str, float]:
        """The earliest-finishing task as ``(task_key, finish)``, left in the queue."""
        entry = self._top()
        return entry[3], entry[0]

    def pop(self) -> tuple[str, float]:
        """Remove and return the earliest-finishing task as ``(task_key, finish)``."""
        entry = self._top()
        heapq.heappop(self._heap)
        del self._live[entry[3]]
        return entry[3], entry[0]

    def remove(self, task_key: str) -> None:
        """Drop a queued task (timed out or cancelled); KeyError if it is not queued."""
        if task_key not in self._live:
            raise KeyError(f"task {task_key!r} is not queued")
        del self._live[task_key]
        # Dead entries stay in the heap until they surface; rebuild once they dominate it.
        if len(self._heap) > 2 * len(self._live) + 16:
            self._heap = sorted(self._live.values())

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, task_key: object) -> bool:
        return task_key in self._live

    def _top(self) -> _Entry:
        heap = self._heap
        while heap and self._live.get(heap[0][3]) != heap[0]:
            heapq.heappop(heap)
        if not heap:
            raise IndexError("the TaskQueue is empty")
        return heap[0]
