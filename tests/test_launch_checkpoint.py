"""The launcher refuses a checkpoint it cannot resume from safely before anything starts: one
line naming the file and what to do, a non-zero exit, no traceback, the file left in place and
never unpickled."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fl_async import statefile
from fl_async.app import launch, superlink
from fl_async.strategies.checkpoint import FILENAME, PICKLED

ROOT = Path(__file__).resolve().parents[1]


class _Marker:
    """Unpickling this creates the file ``path``: proof that the pickle ran code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture(autouse=True)
def _no_superlink(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a bad checkpoint must be refused before a SuperLink starts")

    monkeypatch.setattr(superlink, "start_superlink", refuse)


def _checkpoint(output: Path, name: str, data: bytes) -> Path:
    path = output / "checkpoint" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def _state(**tree) -> bytes:
    return statefile.dumps({"format": "fl-async-checkpoint", "schema": 3, **tree})


@pytest.mark.parametrize(
    "name, data, says",
    [
        (FILENAME, b"MARKER", "not an fl-async state file"),
        (FILENAME, np.random.default_rng(1).bytes(2000), "not an fl-async state file"),
        (FILENAME, _state(state={})[:-7], "truncated"),
        (FILENAME, _state(state={})[:-1] + b"!", "SHA-256 does not match"),
        (FILENAME, b'{"weights": [1, 2, 3]}', "not an fl-async state file"),
        (FILENAME, _state(state={"keys": []}), "RunState does not have the expected fields"),
        (FILENAME, statefile.dumps([1, 2]), "not an fl-async checkpoint"),
        (PICKLED, b"MARKER", "older fl-async, stored with pickle"),
    ],
)
def test_a_bad_checkpoint_is_one_line_and_a_non_zero_exit(tmp_path, capsys, name, data, says):
    output, marker = tmp_path / "run", tmp_path / "ran"
    if data == b"MARKER":
        data = pickle.dumps(_Marker(marker))
    path = _checkpoint(output, name, data)
    argv = ["--app", str(ROOT), "--run-config", f"checkpoint-every=2 output-dir='{output}'"]
    assert launch.main(argv) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert says in lines[0] and str(path) in lines[0] and "delete it" in lines[0]
    assert not marker.exists() and path.read_bytes() == data


def test_the_command_itself_refuses_a_crafted_pickle_without_running_it(tmp_path):
    output, marker = tmp_path / "run", tmp_path / "ran"
    path = _checkpoint(output, PICKLED, pickle.dumps(_Marker(marker)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fl_async.app",
            "--app",
            str(ROOT),
            "--run-config",
            f"checkpoint-every=2 output-dir='{output}'",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "FLWR_HOME": str(tmp_path / "flwr")},
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    assert "cannot be resumed safely" in lines[0] and str(path) in lines[0]
    assert not marker.exists() and path.is_file()
