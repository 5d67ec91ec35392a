"""A study: many runs on one grid (in-process nodes calling the real ClientApp), each with the
history it has alone; a run that fails or is stopped ends with its own status, the others go on."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from bench_fakes import WALL_CLOCK, without
from fakegrid import FakeGrid, task_identity
from memory_app import FAST, context, run_in_memory

from fl_async.app import study_files as files
from fl_async.app.client_app import app as client_app
from fl_async.app.run_status import FAILED, FINISHED, STOPPED, read_run_status
from fl_async.app.study_server import serve
from fl_async.bench.scenarios import to_run_config_text

NODES = 4
BASE = {"num-nodes": NODES, "max-updates": 8, "eval-every": 4, **FAST}
COMPUTED = WALL_CLOCK | {"output-dir"}
"""Left out of a comparison: what depends on the wall clock or on where a run was written."""


class OneAtATime(FakeGrid):
    """A FakeGrid that fails a test when a node gets a message before answering its last one,
    as Flower's simulation would cross the two replies."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.node_of: dict[str, int] = {}
        self.crossed: list[int] = []

    def push_messages(self, messages):  # noqa: D102
        ids = []
        for message in messages:
            node = message.metadata.dst_node_id
            if node in {self.node_of[i] for i in self._pending if i in self.node_of}:
                self.crossed.append(node)
            ids += super().push_messages([message])
            self.node_of[ids[-1]] = node
        return ids


def _nodes() -> OneAtATime:
    """Four in-process nodes whose own run config is empty: every setting they train with
    comes from the run settings a study's message carries."""
    ids = [9000 + 31 * k for k in range(NODES)]

    def node(k):
        ctx = context(partition=k, num_partitions=NODES, run_config={})
        return lambda message: client_app(message, ctx)

    return OneAtATime({ids[k]: node(k) for k in range(NODES)}, delay_seed=5)


def _submit(study: Path, request_id: str, output: Path, **overrides) -> None:
    text = to_run_config_text({**BASE, "output-dir": str(output), **overrides})
    files.submit(study, files.Request(request_id, text, str(output), NODES))


def _study(tmp_path: Path, jobs: int) -> Path:
    study = tmp_path / "study"
    files.write_study(study, jobs=jobs, nodes=NODES, owner_pid=os.getpid())
    return study


RUNS = {
    "gsgm-dirichlet-0": {"strategy": "gsgm", "seed": 0},
    "fedbuff-labelskew-1": {
        "strategy": "fedbuff",
        "seed": 1,
        "partition.scheme": "label_skew",
        "fedbuff.buffer-size": 2,
    },
    "asgd-iid-2": {"strategy": "asgd", "seed": 2, "partition.scheme": "iid"},
}


def test_runs_of_a_study_have_the_histories_they_have_alone_and_a_bad_one_fails_alone(tmp_path):
    study = _study(tmp_path, jobs=2)
    for at, (name, overrides) in enumerate(RUNS.items()):
        _submit(study, f"{at:06d}", tmp_path / "study-runs" / name, **overrides)
        if at == 0:  # a run the ServerApp refuses, between good ones
            _submit(study, "000000b", tmp_path / "study-runs" / "bad", **{"eval-grid": 5})
    files.close(study)
    grid = _nodes()
    with task_identity():
        assert serve(grid, study) == 4
        assert files.read_ended(study) == 4  # its last act: the launcher's sign that it is done
        alone = {
            name: run_in_memory(tmp_path, name, plots=False, **o)[0] for name, o in RUNS.items()
        }
    for name in RUNS:
        output = tmp_path / "study-runs" / name
        history = json.loads((output / "history.json").read_text())
        assert without(history, COMPUTED) == without(alone[name], COMPUTED), name
        status = read_run_status(output)
        assert status.state == FINISHED and status.stopped_by == "budget"
        assert "fl-async: final accuracy" in (output / "run.log").read_text()
    assert grid.crossed == []  # never two messages at one node, though two runs went at once
    assert len(grid.log) > 3 * 8
    bad = tmp_path / "study-runs" / "bad"
    status = read_run_status(bad)
    assert status.state == FAILED and "eval-grid" in status.reason
    assert not (bad / "history.json").exists()
    assert "eval-grid" in (bad / "run.log").read_text()


def test_a_stopped_run_ends_stopped_while_the_other_finishes(tmp_path):
    study = _study(tmp_path, jobs=2)
    long, short = tmp_path / "long", tmp_path / "short"
    _submit(study, "000001", long, **{"max-updates": 100_000})
    _submit(study, "000002", short)
    files.close(study)

    def stop_once_running() -> None:  # as bench does at --run-timeout
        for _ in range(600):
            if (long / "run.log").exists():
                break
            threading.Event().wait(0.05)
        files.ask_to_stop(study, "000001")

    stopper = threading.Thread(target=stop_once_running)
    stopper.start()
    with task_identity():
        assert serve(_nodes(), study) == 2
    stopper.join()
    assert read_run_status(long).state == STOPPED
    assert "wall-clock limit" in read_run_status(long).reason
    assert read_run_status(short).state == FINISHED


def test_a_study_whose_owner_is_gone_takes_no_run_and_ends(tmp_path):
    study = tmp_path / "study"
    files.write_study(study, jobs=1, nodes=NODES, owner_pid=_a_finished_pid())
    _submit(study, "000001", tmp_path / "run")
    with task_identity():
        assert serve(_nodes(), study) == 0
    assert files.read_ended(study) == 0
    assert read_run_status(tmp_path / "run") is None


class LauncherKilledAtPull(OneAtATime):
    """Nodes whose study's launcher (``owner``) is killed during a pull once ``after`` messages
    were sent; every reply that comes then is the error a Ray actor gives once the simulation's
    Ray head died with its launcher."""

    def __init__(self, owner, after: int, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.owner, self.after = owner, after
        self.sent: dict = {}

    def push_messages(self, messages):  # noqa: D102
        messages = list(messages)
        ids = super().push_messages(messages)
        self.sent.update(zip(ids, messages, strict=True))
        return ids

    def pull_messages(self, message_ids):  # noqa: D102
        if len(self.log) < self.after or self.owner.poll() is not None:
            return super().pull_messages(message_ids)
        self.owner.kill()
        self.owner.wait()  # reaped: gone, as a killed launcher is to the study
        from flwr.app import Error, Message

        died = Error(code=0, reason="<class 'ray.exceptions.ActorDiedError'>: owner died")
        return [Message(died, reply_to=self.sent[i]) for i in list(self._pending)]


def test_replies_that_come_after_the_launcher_is_killed_never_reach_the_run(tmp_path):
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    study = tmp_path / "study"
    files.write_study(study, jobs=1, nodes=NODES, owner_pid=owner.pid)
    _submit(study, "000001", tmp_path / "run", **{"max-updates": 100_000, "checkpoint-every": 1})
    nodes = _nodes()
    with task_identity():
        assert serve(LauncherKilledAtPull(owner, 12, nodes.handlers, delay_seed=5), study) == 1
    status = read_run_status(tmp_path / "run")
    assert status.state == STOPPED and status.reason == "the study ended before this run did"
    assert "fault" not in (tmp_path / "run" / "run.log").read_text()  # nor in a checkpoint


def _a_finished_pid() -> int:
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_message_whose_run_settings_hold_other_keys_is_refused():
    from flwr.app import ConfigRecord, Message, RecordDict

    from fl_async.clients.client_app import run_config_of

    content = RecordDict({"run-settings": ConfigRecord({"seed": 1, "output-dir": "/tmp/x"})})
    with task_identity():
        message = Message(content, dst_node_id=1, message_type="train")
    with pytest.raises(ValueError, match="only the node keys.*got output-dir"):
        run_config_of(message, context())


def test_a_reply_pulled_after_the_run_was_stopped_is_not_handed_to_it():
    from flwr.app import ConfigRecord

    from fl_async.app.run_grid import RunGrid, RunStopped

    stopped: list[str] = []

    class StoppedDuringPull:  # the study's owner dies while the replies are pulled
        def pull(self, message_ids):
            stopped.append("the study ended before this run did")
            return ["a reply from a dying simulation"]

    grid = RunGrid(StoppedDuringPull(), ConfigRecord({}), lambda: stopped[0] if stopped else None)
    with pytest.raises(RunStopped, match="the study ended"):
        grid.pull_messages(["m1"])
