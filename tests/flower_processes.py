"""Start processes, and stop them and everything they started, by PID.

Every process started here is tagged in its environment (``TAG_VAR``); everything it starts
inherits the tag (SuperExec, ServerApp, ClientApp; Ray's workers), so what it started is found
even after it left the process tree. Stopping is SIGTERM, then SIGKILL after a grace period, and
never reaches a reused PID. Ports are the launcher's (``fl_async.app.ports``); waits are bounded.
``flower_deployment`` starts Flower's deployment engine with these, ``ray_cluster`` a Ray cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from fl_async.app import ports

GRACE = 10.0  # seconds between SIGTERM and SIGKILL
TAG_VAR = "FL_ASYNC_FLOWER_PROCESS"  # marks the environment of every process started here
T = TypeVar("T")


class FlowerProcessError(RuntimeError):
    """A Flower process did not come up, or a Flower command failed."""


# ------------------------------------------------------------------------------ ports, PIDs
def free_port(taken: set[int] | None = None) -> int:
    """A free TCP port for a test's server (the launcher's choice), recorded in ``taken``."""
    port = ports.free_port()
    if taken is not None:
        taken.add(port)
    return port


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    """The start time (clock ticks) of a live process, None when gone or a zombie."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else int(fields[19])


def descendants(pid: int) -> set[tuple[int, int]]:
    """``(pid, start time)`` of every live descendant of ``pid``."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if (started := _start_time(child)) is not None:
                found.add((child, started))
                todo.append(child)
    return found


def tagged(tag: str) -> set[tuple[int, int]]:
    """``(pid, start time)`` of every live process whose environment holds ``TAG_VAR=tag``
    (or ``TAG_VAR=tag/...``).

    Every process a Flower process starts inherits its environment, also after its parent
    died (re-parented to init) or when it started a new session (the SuperLink's SuperExec).
    """
    marker, below = f"{TAG_VAR}={tag}".encode(), f"{TAG_VAR}={tag}/".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(v == marker or v.startswith(below) for v in environ.split(b"\0")) and (
            started := _start_time(int(entry.name))
        ):
            found.add((int(entry.name), started))
    return found


def _alive(pid: int, started: int) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (PID not reused)."""
    return _start_time(pid) == started


def signal_processes(procs: Iterable[tuple[int, int]], sig: int) -> None:
    """Send ``sig`` to those of ``procs`` (pid, start time) still running, never a reused PID."""
    for pid, started in procs:
        if _alive(pid, started):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def wait_processes_gone(procs: Iterable[tuple[int, int]], timeout: float) -> set[tuple[int, int]]:
    """Wait until the processes are gone (a zombie counts as gone); those alive after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    left = {p for p in procs if _alive(*p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if _alive(*p)}
    return left


# ------------------------------------------------------------------------------ waits
def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    alive: FlowerProcess | None = None,
    context: Callable[[], str] | None = None,
    interval: float = 0.2,
) -> T:
    """Poll ``condition()`` every ``interval`` s until it returns a true value; that value.

    Raises ``FlowerProcessError`` naming ``what``, followed by ``context()`` (say, the logs), after
    ``timeout`` s, or as soon as ``alive`` (the process the awaited state depends on) has exited.
    """
    deadline = time.monotonic() + timeout
    reason = f"not within {timeout:g} s"
    while time.monotonic() < deadline:
        if value := condition():
            return value
        if alive is not None and not alive.running():
            reason = f"{alive.name} exited first"
            break
        time.sleep(interval)
    raise FlowerProcessError(f"{what}: {reason}" + (f"\n{context()}" if context else ""))


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``; None while it is missing or half-written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------ processes
@dataclass
class FlowerProcess:
    """One process we started (tagged ``TAG_VAR=tag`` with all it starts), with its log."""

    name: str
    tag: str
    popen: subprocess.Popen
    log_path: Path
    known: set[tuple[int, int]] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None  # also reaps it once it exited

    def members(self) -> set[tuple[int, int]]:
        """The live processes it started (by tag or as descendants), itself excluded."""
        if self.running():
            self.known |= descendants(self.pid)
        self.known = {p for p in self.known | tagged(self.tag) if _alive(*p)}
        return {p for p in self.known if p[0] != self.pid}

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, *, sig: int = signal.SIGTERM, grace: float = GRACE) -> None:
        """Send ``sig`` to the process, then to what it started; SIGKILL after ``grace``.

        The process gets a moment to stop its own children first (a SuperLink stops its
        SuperExec, a SuperNode its ClientApp). Everything is addressed by PID.
        """
        members = self.members()
        if self.running():
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=grace)
        left = wait_processes_gone(members | self.members(), 0.0 if sig == signal.SIGKILL else 3.0)
        signal_processes(left, sig)
        left = wait_processes_gone(left, grace)
        signal_processes(left, signal.SIGKILL)
        wait_processes_gone(left, grace)

    def leftovers(self) -> list[int]:
        """PIDs of this process and of what it started that still run."""
        return sorted(({self.pid} if self.running() else set()) | {p for p, _ in self.members()})


def spawn(name: str, cmd: list[str], env: Mapping[str, str], log_dir: Path) -> FlowerProcess:
    """Start ``cmd`` in a session of its own, tagged ``TAG_VAR=<env's tag>/<name>`` (so that what
    it starts is found by PID later), stdout and stderr to ``<log_dir>/<name>.log``."""
    tag = f"{env[TAG_VAR]}/{name}"
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as out:
        popen = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**env, TAG_VAR: tag},
            start_new_session=True,  # a Ctrl-C in the terminal does not reach it directly
        )
    return FlowerProcess(name, tag, popen, log_path)
