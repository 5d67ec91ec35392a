"""A local simulation SuperLink of our own: started on free ports, stopped with every process
under it.

A SuperLink someone else left running is never reused, and after a run (finished, failed or
interrupted) nothing it started is left behind: the SuperExec, the ServerApp, the simulation
and Ray are found below the SuperLink's process and stopped by their process ids. On Linux the
SuperLink also stops when the launcher is killed outright (SIGKILL), through the supervisor of
``fl_async.app.supervisor``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from fl_async.app import ports, supervisor

QUIET_ENVIRONMENT: dict[str, str] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    # The environment is installed already: without this, the SuperLink runs `uv sync` into a
    # fresh environment for every run (slow, and blind to pip's constraints).
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
}
"""Set unless the caller's environment already sets them."""

SUPERLINK_START_TIMEOUT = 60.0
STOP_GRACE = 15.0


def environment() -> dict[str, str]:
    """This process's environment with ``QUIET_ENVIRONMENT``, this Python's ``bin/`` first on
    ``PATH`` (Flower starts its commands by name) and two free ports for the SuperLink."""
    env = dict(os.environ)
    for key, value in QUIET_ENVIRONMENT.items():
        env.setdefault(key, value)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(ports.free_port())
    env["FLWR_LOCAL_CONTROL_API_PORT"] = str(ports.free_port())
    return env


def _healthy(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_superlink(env: dict[str, str], *, cwd: Path, log_file: Path) -> subprocess.Popen:
    """A simulation SuperLink on the ports in ``env``, ready to accept runs.

    The same command ``flwr run`` uses for its local SuperLink, started here so that its
    process id is known and the ServerApp's working directory is ``cwd``.
    """
    http_port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
    command = [
        shutil.which("flower-superlink", path=env.get("PATH")) or "flower-superlink",
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        f"127.0.0.1:{env['FLWR_LOCAL_CONTROL_API_PORT']}",
        "--host",
        "127.0.0.1",
        "--port",
        http_port,
        "--log-file",
        str(log_file),
    ]
    process = subprocess.Popen(
        # Stopped with the launcher even when it is killed outright (SIGKILL): the supervisor
        # passes SIGTERM on and kills what is left STOP_GRACE seconds later.
        supervisor.dying_with_this_process(command, STOP_GRACE),
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own session: Ctrl-C in a terminal reaches this script and flwr run, not the
        # SuperLink, which `stop` then ends together with everything under it.
        start_new_session=True,
    )
    deadline = time.monotonic() + SUPERLINK_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with code {process.returncode}; see {log_file}"
            )
        if _healthy(http_port):
            return process
        time.sleep(0.05)  # every launch waits here: a refused local connection costs nothing
    stop(process)
    raise RuntimeError(f"flower-superlink did not start in {SUPERLINK_START_TIMEOUT:.0f} s")


def stop(process: subprocess.Popen, *, grace: float | None = None, term_all: bool = True) -> None:
    """Stop the SuperLink and every process under it (SuperExec, ServerApp, simulation, Ray).

    SIGTERM to all of them (to ``process`` alone unless ``term_all``: it stops what is under
    it; never to a supervisor when ``term_all``: its command gets one SIGTERM, not two), SIGKILL
    to any still there after ``grace`` seconds (default ``STOP_GRACE``). The SuperExec starts
    its own session, and after an interrupted run the simulation and Ray would outlive the
    SuperLink: the tree is read before anything is signalled.
    """
    tree = [process.pid, *descendants(process.pid)]
    if not term_all:
        _signal([process.pid], signal.SIGTERM)
    else:
        _signal(tree[1:] if supervisor.is_supervised(process) else tree, signal.SIGTERM)
    deadline = time.monotonic() + (STOP_GRACE if grace is None else grace)
    while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
        process.poll()  # reap the SuperLink, our child, so that it does not count as alive
        time.sleep(0.2)
    _signal([pid for pid in tree if _alive(pid)], signal.SIGKILL)
    process.wait()


def end(process: subprocess.Popen) -> None:
    """Stop one child process: SIGTERM, then SIGKILL after ``STOP_GRACE`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from ``ps`` (Linux and macOS)."""
    try:
        table = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:  # a minimal container without ps: only the SuperLink is stopped
        return []
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        child, parent = (int(word) for word in line.split())
        children.setdefault(parent, []).append(child)
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _signal(pids: Sequence[int], sent: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sent)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
