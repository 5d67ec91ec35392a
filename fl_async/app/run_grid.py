"""The grid of a study's simulation, shared by its runs: one message in flight per node, and
one view of it per run.

Flower's simulation keys a node's running task by the node (its Ray actor pool maps a
partition to one future): a second message to a node whose first is still running crosses the
two replies. One run never does that; several runs of one simulation would. ``SharedGrid``
therefore sends a message only once its node has answered the last one, whichever run sent it,
and it pulls every run's replies itself, so a node is free as soon as its reply arrives, even
when the run that sent it has ended and will never ask. A run that sends to a busy node waits
for that node (at most ``BUSY_LIMIT`` seconds): its messages, and so its history, are what they
would be alone; only wall times change.

Every message a run sends carries the run's node settings (``RUN_SETTINGS_KEY``): the nodes of
one simulation serve every run of a study. A run asked to stop (its wall-clock limit, the
study's end) gets ``RunStopped`` from its next call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fl_async.protocol import RUN_SETTINGS_KEY

BUSY_LIMIT = 3600.0
"""Seconds a run waits for a node that another run's task holds (a task's TTL is shorter)."""
_WAIT = (0.002, 0.05)
"""The first and the longest pause between two looks at a busy node."""


class RunStopped(RuntimeError):
    """The study asked this run to stop; the message says why."""


class SharedGrid:
    """``grid`` shared by a study's runs: sends at most one message per node at a time and
    keeps each reply until its run pulls it (or drops it once that run has closed)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self._lock = threading.Lock()
        self._busy: set[int] = set()
        """The nodes working on a message."""
        self._sent: dict[str, tuple[int, object | None]] = {}
        """Message id (in flight) -> its node and the run view that sent it (None: that run has
        closed)."""
        self._replies: dict[str, tuple[object, Message]] = {}
        """Message id -> its run view and its reply, until the run pulls it."""

    def push(self, run: object, message: Message) -> str:
        """Send ``message`` for ``run`` once its node is free; its id ("" if Flower refused it)."""
        node, pause = message.metadata.dst_node_id, _WAIT[0]
        deadline = time.monotonic() + BUSY_LIMIT
        while True:
            with self._lock:
                self._collect()
                if node not in self._busy:
                    ids = list(self.grid.push_messages([message]))
                    if ids and ids[0]:
                        self._busy.add(node)
                        self._sent[ids[0]] = (node, run)
                    return ids[0] if ids else ""
            if time.monotonic() > deadline:
                raise RunStopped(f"node {node} stayed busy with another run's task")
            run.check()  # type: ignore[attr-defined]
            time.sleep(pause)
            pause = min(2 * pause, _WAIT[1])

    def pull(self, message_ids: Iterable[str]) -> list[Message]:
        """The replies to ``message_ids`` that came (each handed out once)."""
        with self._lock:
            self._collect()
            return [self._replies.pop(i)[1] for i in message_ids if i in self._replies]

    def close(self, run: object) -> None:
        """``run`` ended: drop its replies, and those still to come."""
        with self._lock:
            for message_id in [i for i, (owner, _) in self._replies.items() if owner is run]:
                del self._replies[message_id]
            for message_id, (node, owner) in list(self._sent.items()):
                if owner is run:
                    self._sent[message_id] = (node, None)

    def _collect(self) -> None:
        """Pull every reply that came; free its node; keep it for its run (lock held)."""
        if not self._sent:
            return
        for reply in self.grid.pull_messages(list(self._sent)):
            message_id = reply.metadata.reply_to_message_id
            if message_id not in self._sent:
                continue
            node, owner = self._sent.pop(message_id)
            self._busy.discard(node)
            if owner is not None:
                self._replies[message_id] = (owner, reply)


class StoppableGrid(Grid):
    """A grid for a run that may be asked to stop: once ``stop()`` returns a reason, ``check()``
    raises ``RunStopped`` with it."""

    def __init__(self, stop: Callable[[], str | None]) -> None:
        self._stop = stop

    def check(self) -> None:
        """Raise ``RunStopped`` if the run was asked to stop."""
        reason = self._stop()
        if reason is not None:
            raise RunStopped(reason)

    def checked_replies(self, pull: Callable[[], Iterable[Message]]) -> list[Message]:
        """The replies ``pull()`` brings, if the run was not asked to stop before or during it.
        Looked at again after: once a launcher is killed, its Ray head dies too and the nodes'
        replies say so (ActorDiedError). Such a reply, pulled after the stop, must not reach
        the run as its node's fault, nor a checkpoint that a resumed run would replay."""
        self.check()
        replies = list(pull())
        self.check()
        return replies

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Flower's deprecated message factory."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)


class RunGrid(StoppableGrid):
    """One run's view of a ``SharedGrid``: its messages carry ``settings``; once ``stop()``
    returns a reason, every call raises ``RunStopped``."""

    def __init__(
        self, shared: SharedGrid, settings: ConfigRecord, stop: Callable[[], str | None]
    ) -> None:
        super().__init__(stop)
        self._shared = shared
        self._settings = settings

    def close(self) -> None:
        """The run ended: its replies still to come are dropped."""
        self._shared.close(self)

    def set_run(self, run) -> None:  # noqa: ANN001 (Flower's Run)
        """Refused: Flower sets the run once, on the shared grid."""
        raise RuntimeError("a study's runs share one Flower run; it is set on the shared grid")

    @property
    def run(self):  # noqa: ANN201 (Flower's Run)
        """The Flower run every run of the study belongs to."""
        return self._shared.grid.run

    def get_node_ids(self) -> Iterable[int]:
        """The simulation's nodes (every run of the study sees them all)."""
        self.check()
        return self._shared.grid.get_node_ids()

    def get_nodes(self) -> Iterable:
        """The simulation's nodes' information."""
        self.check()
        return self._shared.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Send ``messages`` with the run's node settings, each once its node is free; their
        ids in order ("" where Flower refused one)."""
        self.check()
        ids = []
        for message in messages:
            message.content[RUN_SETTINGS_KEY] = self._settings
            ids.append(self._shared.push(self, message))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to ``message_ids`` that came, if the run was not stopped meanwhile."""
        return self.checked_replies(lambda: self._shared.pull(message_ids))

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Send ``messages`` and wait for their replies (until ``timeout`` seconds passed)."""
        waiting = {i for i in self.push_messages(messages) if i}
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while waiting and (end is None or time.monotonic() < end):
            came = list(self.pull_messages(list(waiting)))
            replies += came
            waiting -= {r.metadata.reply_to_message_id for r in came}
            time.sleep(_WAIT[1])
        return replies
