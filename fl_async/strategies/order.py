"""The reply order: which reply the event loop handles next, and what time it is.

With a virtual clock (``VirtualOrder``) every task gets a simulated duration at dispatch and
replies are handled strictly in virtual-finish order, whatever order they arrive in, so a seeded
run gives the same history on any machine (docs/algorithms.md, Virtual clock). Without one
(``ArrivalOrder``, real devices) replies are handled as they arrive and durations are measured.
The loop chooses one at the start and never asks which it has.
"""

from __future__ import annotations

import abc
import math
import time

from fl_async.scheduling import TaskQueue, VirtualClock
from fl_async.strategies.tasks import Task, TaskBook


class ReplyOrder(abc.ABC):
    """Times tasks and picks the next reply; ``now`` is the run's virtual time (0 in real time)."""

    def __init__(self) -> None:
        self.now = 0.0

    @abc.abstractmethod
    def timing(
        self, stable_id: int, task_index: int, *, examples: int, model_bytes: int
    ) -> tuple[float, float]:
        """``(start, finish)`` of a task dispatched now (finish ``inf`` when unknown)."""

    def dispatch_time(self) -> float:
        """The time a task dispatched now starts at (``timing``'s start)."""
        return self.now

    def track(self, msg_id: str, task: Task) -> None:  # noqa: B027 (a hook)
        """A task was dispatched as ``msg_id``."""

    @abc.abstractmethod
    def wanted(self, book: TaskBook) -> list[str]:
        """The tasks whose reply may be handled next (at least one task is in flight)."""

    @abc.abstractmethod
    def overdue(self, book: TaskBook, wanted: list[str]) -> str:
        """The task to give up on when none of ``wanted`` answered within the timeout."""

    @abc.abstractmethod
    def closed(self, msg_id: str, task: Task, *, arrival: float, advance: bool) -> float:
        """``task`` left the book (answered at wall time ``arrival``, timed out or lost); with
        ``advance`` the run's time moves to its end. Returns its duration."""

    @abc.abstractmethod
    def describe(self, wall: float) -> str:
        """The current time for a progress line."""

    def state_dict(self) -> dict[str, float]:
        """The run's virtual time."""
        return {"now": self.now}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore ``state_dict()``."""
        self.now = float(state["now"])


class VirtualOrder(ReplyOrder):
    """Virtual-finish order: the earliest-finishing task is awaited while the others compute."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        self._queue = TaskQueue()

    def timing(
        self, stable_id: int, task_index: int, *, examples: int, model_bytes: int
    ) -> tuple[float, float]:
        duration = self.clock.duration(
            stable_id,
            task_index,
            examples=examples,
            bytes_down=model_bytes,
            bytes_up=model_bytes,
        )
        return self.now, self.now + duration

    def track(self, msg_id: str, task: Task) -> None:
        self._queue.push(msg_id, task.finish, task.stable_id)

    def wanted(self, book: TaskBook) -> list[str]:
        return [self._queue.peek()[0]]

    def overdue(self, book: TaskBook, wanted: list[str]) -> str:
        return wanted[0]

    def closed(self, msg_id: str, task: Task, *, arrival: float, advance: bool) -> float:
        if msg_id in self._queue:
            self._queue.remove(msg_id)
        if advance:
            self.now = max(self.now, task.finish)
        return task.finish - task.start

    def describe(self, wall: float) -> str:
        return f"virtual time {self.now:.1f}"


class ArrivalOrder(ReplyOrder):
    """Arrival order (real time): any reply in flight is handled as soon as it is pulled."""

    def timing(
        self, stable_id: int, task_index: int, *, examples: int, model_bytes: int
    ) -> tuple[float, float]:
        return time.time(), math.inf

    def dispatch_time(self) -> float:
        return time.time()

    def wanted(self, book: TaskBook) -> list[str]:
        return book.ids()

    def overdue(self, book: TaskBook, wanted: list[str]) -> str:
        return min(wanted, key=lambda m: book[m].dispatched_wall)

    def closed(self, msg_id: str, task: Task, *, arrival: float, advance: bool) -> float:
        return arrival - task.start

    def describe(self, wall: float) -> str:
        return f"wall time {wall:.1f} s"


def reply_order(clock: VirtualClock | None) -> ReplyOrder:
    """The order for ``clock``: virtual-finish order with one, arrival order without."""
    return VirtualOrder(clock) if clock is not None else ArrivalOrder()
