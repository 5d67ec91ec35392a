"""A bench run killed outright (SIGKILL of its whole process group, as the end of a session kills
it) with ``checkpoint-every`` set resumes from its last checkpoint when the same command runs
again, and writes the history an uninterrupted run writes (the claims study relies on it); its
Ray head and its SuperLink, each in a session of its own, stop with it. The uninterrupted run is
the same run under another name (``--variant twin=asgd``), made in the launch that resumes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fl_async.app import local_ray
from fl_async.app.outcome import SUPERLINK_LOG
from fl_async.bench.engines import STUDIES
from fl_async.cli import main
from fl_async.strategies.checkpoint import FILENAME

ROOT = Path(__file__).resolve().parents[1]
SUITE = [
    "--scenario",
    "a",
    "--splits",
    "dirichlet",
    "--seeds",
    "0",
    "--nodes",
    "4",
    "--max-virtual-time",
    "3000",
    "--grid",
    "10",
    "--strategies",
    "asgd",
    "--run-config",
    # the logistic regression: what is checked (the resumed history equals the uninterrupted
    # one) does not depend on the model, and the CNN's training and evaluations cost more
    "checkpoint-every=2 model='logreg'",
    "--actors",
    "1",
    # the same run under another name, made whole in the launch that resumes the cut one: its
    # uninterrupted twin, without a launch of its own (a launch costs about 25 CPU-seconds)
    "--variant",
    "twin=asgd",
]
STATE = Path("checkpoint") / FILENAME
DROP = {"wall-time", "node-id"}
"""What a seeded run does not fix: wall times and Flower's random node ids."""


def _comparable(history: dict) -> dict:
    lists = ("evaluations", "updates", "grid-evaluations")
    fixed = {k: [{f: v for f, v in e.items() if f not in DROP} for e in history[k]] for k in lists}
    totals = ("num-updates", "server-steps", "virtual-time", "final-accuracy", "rejected", "faults")
    return fixed | {key: history[key] for key in (*totals, "stopped-by")}


def _naming(names: set[str]) -> list[int]:
    """The processes whose command line holds one of ``names``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(name in command for name in names):
            found.append(int(proc.name))
    return found


def _run_processes(run: Path) -> list[int]:
    """The processes of the simulation whose logs are in ``run``: its Ray head (their command
    lines name its directory, which its ``ray.log`` names), its SuperLink (with its supervisor:
    they name its ``superlink.log``) and the SuperExec under it (which names the SuperLink's
    pid)."""
    ray_log = run / local_ray.LOG
    names = set(re.findall(r"fl-async-ray-\w+", ray_log.read_text(errors="replace")))
    assert names, f"{ray_log} names no Ray directory"
    links = _naming({str(run / SUPERLINK_LOG)})
    return sorted(set(_naming(names | {f"--parent-pid\0{pid}\0" for pid in links}) + links))


def _kill_after_first_checkpoint(argv: list[str], run: Path, env: dict) -> None:
    """``fl-async argv`` in a new session, SIGKILLed whole once ``run`` has a checkpoint; then
    the run's Ray head and SuperLink, each in a session of its own, must stop by themselves
    (they die with their launcher)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fl_async.cli", *argv],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (run / STATE).is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    # the study's simulation (its SuperLink, Ray head and logs) serves the suite's runs
    (simulation,) = (run.parents[1] / STUDIES).iterdir()
    deadline = time.monotonic() + 60
    while (left := _run_processes(simulation)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:  # so that a failure leaves nothing behind
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the run's processes {left} outlived the killed launcher"


@pytest.mark.slow(seconds=120)
def test_a_killed_run_resumes_from_its_checkpoint_to_the_uninterrupted_history(tmp_path):
    cut = tmp_path / "cut"
    run, twin = cut / "dirichlet" / "asgd-seed0", cut / "dirichlet" / "twin-seed0"
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr")}
    _kill_after_first_checkpoint(["bench", *SUITE, "--out", str(cut)], run, env)
    assert (run / STATE).is_file() and not (run / "history.json").exists()  # cut mid-run
    assert not twin.exists()  # one run at a time: the twin comes after
    assert main(["bench", *SUITE, "--out", str(cut)]) == 0
    log = (run / "run.log").read_text(errors="replace")
    resumed, uninterrupted = (
        json.loads((folder / "history.json").read_text()) for folder in (run, twin)
    )
    assert "Resumed from" not in (twin / "run.log").read_text(errors="replace")
    at = re.search(r"Resumed from .* at server step (\d+)", log)  # resumed, not started again
    assert at is not None and 2 <= int(at.group(1)) < resumed["server-steps"]
    assert _comparable(resumed) == _comparable(uninterrupted)
