"""Sending train tasks to the grid: all at once, or a few ahead in virtual-finish order.

Flower's simulation engine runs the tasks it holds in the order they reach it, while the event
loop applies replies in virtual-finish order. Sent all at once, a slow node's task is computed
long before its turn, and later the loop waits on a chain of a fast node's tasks, one at a time,
with the other cores idle. With ``ahead`` set, the outbox keeps at most that many tasks
unanswered at the grid and sends the tasks it holds earliest virtual finish first (the awaited
one always at once), so the engine computes them about in the order the loop needs them. What a
task computes is fixed when it is made (its base model, seed and virtual times), and its message
is built when it is sent (a fresh TTL), so holding a task changes when it runs, never the history.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable

from flwr.app import Message
from flwr.serverapp import Grid

from fl_async.strategies.tasks import Task, TaskBook

MakeMessage = Callable[[], Message]
"""Builds a task's message when it is sent."""


class Outbox:
    """The tasks made and not answered: held back, or sent and known by their grid message id.

    A task's key (``task-<n>``) is the outbox's own, given when it is made; the grid's message
    id, known once it is sent, maps to it. Without ``ahead`` ``release`` sends every held task.
    """

    def __init__(self, ahead: int | None = None) -> None:
        self.ahead = ahead
        self._made = 0
        self._held: dict[str, tuple[Task, MakeMessage]] = {}
        self._queue: list[tuple[float, int, int, str]] = []  # (finish, stable id, n, key)
        self._sent: dict[str, str] = {}  # key -> grid message id
        self._key_of: dict[str, str] = {}  # grid message id -> key

    def add(self, task: Task, make: MakeMessage) -> str:
        """Hold a new task until ``release`` sends it; its key."""
        self._made += 1
        key = f"task-{self._made}"
        self._held[key] = (task, make)
        heapq.heappush(self._queue, (task.finish, task.stable_id, self._made, key))
        return key

    def release(self, grid: Grid, book: TaskBook, wanted: Iterable[str]) -> list[str]:
        """Send every awaited task still held, then the earliest-finishing ones while fewer
        than ``ahead`` are unanswered at the grid (all without ``ahead``); the keys whose push
        failed."""
        if not self._held:
            return []
        made = [(key, *self._held.pop(key)) for key in self._chosen(book, wanted)]
        ids = list(grid.push_messages([make() for _, _, make in made]))
        now, failed = time.time(), []
        for at, (key, task, _) in enumerate(made):
            msg_id = ids[at] if at < len(ids) else None
            if not msg_id:
                failed.append(key)
                continue
            task.dispatched_wall = now
            self._sent[key], self._key_of[msg_id] = msg_id, key
        if not self._held:
            self._queue.clear()
        return failed

    def _chosen(self, book: TaskBook, wanted: Iterable[str]) -> list[str]:
        """The held tasks to send now, in the order they go."""
        if self.ahead is None:
            return list(self._held)  # in the order they were made
        chosen = [key for key in wanted if key in self._held]
        room = self.ahead - sum(not book.stashed(k) for k in self._sent) - len(chosen)
        while room > 0 and self._queue:
            key = heapq.heappop(self._queue)[3]
            if key in self._held and key not in chosen:  # chosen: a few keys at most
                chosen.append(key)
                room -= 1
        return chosen

    def to_pull(self, book: TaskBook) -> list[str]:
        """Every sent task whose reply has not been pulled (a few at most with ``ahead``)."""
        return [key for key in self._sent if not book.stashed(key)]

    def pull(self, grid: Grid, keys: list[str]) -> list[tuple[str, Message]]:
        """The replies among ``keys`` that have come, each with its key."""
        ids = [self._sent[key] for key in keys if key in self._sent]
        replies = grid.pull_messages(ids) if ids else []
        return [
            (self._key_of[r.metadata.reply_to_message_id], r)
            for r in replies
            if r.metadata.reply_to_message_id in self._key_of
        ]

    def forget(self, key: str) -> None:
        """``key``'s task left the book (answered, timed out or lost): stop holding it."""
        self._held.pop(key, None)
        msg_id = self._sent.pop(key, None)
        if msg_id is not None:
            del self._key_of[msg_id]

    def clear(self) -> None:
        """Forget every task (the run is over)."""
        self._held.clear()
        self._queue.clear()
        self._sent.clear()
        self._key_of.clear()

    @property
    def held(self) -> int:
        """Tasks made and not sent yet."""
        return len(self._held)
