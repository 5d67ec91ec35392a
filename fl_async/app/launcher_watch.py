"""A simulation's run stops once the launcher that started it is gone.

``python -m fl_async.app`` names itself to the simulation it starts (``LAUNCHER_PID`` in the
environment that Flower's processes inherit). When that launcher is killed outright (SIGKILL, the
end of a session), its Ray head dies next, and the nodes' replies then report that
(``ActorDiedError``): they are not the nodes' faults, and a checkpoint holding them would make a
resumed run differ from an uninterrupted one. So the run's grid looks at the launcher on each
call and again after each pull: the run stops (``RunStopped``) before it takes in a reply that
came after its launcher died.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from flwr.app import Message
from flwr.serverapp import Grid

from fl_async.app.run_grid import StoppableGrid
from fl_async.app.study_files import owner_alive

LAUNCHER_PID = "FL_ASYNC_LAUNCHER_PID"
"""The environment variable that holds the launcher's process id."""
GONE = "the launcher ended before this run did"
"""Why a run whose launcher is gone stopped."""


def launcher_pid(environ: Mapping[str, str]) -> int | None:
    """The launcher's process id that ``environ`` names (None: no launcher named, or not a
    process id)."""
    text = environ.get(LAUNCHER_PID, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def launcher_environment() -> dict[str, str]:
    """What a launcher adds to the environment of the simulation it starts."""
    return {LAUNCHER_PID: str(os.getpid())}


class WatchedGrid(StoppableGrid):
    """``grid`` for a run that stops (``RunStopped``) once process ``launcher`` is gone."""

    def __init__(self, grid: Grid, launcher: int) -> None:
        super().__init__(lambda: None if owner_alive(launcher) else GONE)
        self._grid = grid

    def set_run(self, run) -> None:  # noqa: ANN001 (Flower's Run)
        """Flower's ``set_run``."""
        self._grid.set_run(run)

    @property
    def run(self):  # noqa: ANN201 (Flower's Run)
        """The Flower run."""
        return self._grid.run

    def get_node_ids(self) -> Iterable[int]:
        """The nodes' ids."""
        self.check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Send ``messages``; their ids."""
        self.check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to ``message_ids`` that came, if the launcher is still there after."""
        return self.checked_replies(lambda: self._grid.pull_messages(message_ids))

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Send ``messages`` and wait for their replies, if the launcher is still there after."""
        return self.checked_replies(lambda: self._grid.send_and_receive(messages, timeout=timeout))
