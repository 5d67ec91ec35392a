"""A run that its launcher started stops once that launcher is gone, before it takes in a reply
that came after (``fl_async.app.launcher_watch``): a killed launcher's Ray head dies next, and
the replies that follow tell only of that, not of the nodes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fakegrid import FakeGrid, task_identity
from flwr.app import Error, Message, RecordDict

from fl_async.app import launcher_watch
from fl_async.app.config import parse_run_config
from fl_async.app.launcher_watch import GONE, LAUNCHER_PID, WatchedGrid, launcher_pid
from fl_async.app.run_grid import RunStopped
from fl_async.app.run_status import STOPPED, read_run_status
from fl_async.app.server_run import run_alone


def _finished_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize(
    "environ, pid",
    [({LAUNCHER_PID: "4242"}, 4242), ({}, None), ({LAUNCHER_PID: "x1"}, None)]
    + [({LAUNCHER_PID: "0"}, None), ({LAUNCHER_PID: "-3"}, None), ({LAUNCHER_PID: ""}, None)],
)
def test_the_launcher_is_named_by_a_positive_process_id_or_not_at_all(environ, pid):
    assert launcher_pid(environ) == pid


def test_a_launcher_names_its_own_process():
    assert launcher_watch.launcher_environment() == {LAUNCHER_PID: str(os.getpid())}


class KilledDuringPull(FakeGrid):
    """One node; the launcher is killed while the reply to its first message is pulled, and
    that reply is the error a Ray actor gives once the Ray head died with the launcher."""

    def __init__(self, launcher: subprocess.Popen) -> None:
        super().__init__({1: lambda m: Message(RecordDict(), reply_to=m)}, max_delay=0)
        self.launcher = launcher

    def pull_messages(self, message_ids):  # noqa: D102
        replies = list(super().pull_messages(message_ids))
        self.launcher.kill()
        self.launcher.wait()  # reaped: gone
        died = Error(code=0, reason="<class 'ray.exceptions.ActorDiedError'>")
        return [Message(died, reply_to=self.sent) for _ in replies]

    def push_messages(self, messages):  # noqa: D102
        messages = list(messages)
        self.sent = messages[-1]
        return super().push_messages(messages)


def test_a_reply_pulled_after_the_launcher_died_is_not_handed_to_the_run():
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    grid = KilledDuringPull(launcher)
    watched = WatchedGrid(grid, launcher.pid)
    assert list(watched.get_node_ids()) == [1]  # while the launcher runs, the grid's answers
    with task_identity():
        ids = list(watched.push_messages([Message(RecordDict(), 1, "train")]))
    with pytest.raises(RunStopped, match=GONE):
        watched.pull_messages(ids)
    with pytest.raises(RunStopped, match=GONE):  # and every call after
        watched.push_messages([])


def test_a_run_whose_launcher_is_gone_ends_stopped_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv(LAUNCHER_PID, str(_finished_pid()))
    output = tmp_path / "run"
    config = parse_run_config({"num-nodes": 2, "output-dir": str(output), "model": "logreg"})
    with task_identity():
        assert run_alone(FakeGrid({}), config) == output
    status = read_run_status(output)
    assert status.state == STOPPED and status.reason == GONE
    assert not (output / "history.json").exists()
