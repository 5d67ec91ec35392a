"""Start a suite's runs as subprocesses, several at once, and stop them all on an interrupt.

Each run is one ``python -m fl_async.app`` with its output sent to its ``run.log``. The launcher
stops its SuperLink on SIGINT, so SIGINT is what a run gets when the suite is interrupted or
terminated, or when it outlives its wall-clock limit; one that is still there ``STOP_GRACE``
seconds later is killed, so no wait of the suite is unbounded.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

STOP_GRACE = 60.0
"""Seconds a run gets to stop its SuperLink after SIGINT before it is killed."""
TIMED_OUT = 124
"""The exit code given to a run stopped at its wall-clock limit (as ``timeout(1)`` gives)."""


class Launch(Protocol):
    """Runs one command with its output sent to a log file, returning its exit code; called from
    several threads at once, and ``stop_all`` stops every command still running."""

    def __call__(self, command: list[str], log: Path) -> int: ...

    def stop_all(self) -> None: ...


class Subprocesses:
    """``Launch`` by subprocesses: each run at most ``timeout`` seconds of wall time (None: no
    limit), then stopped and given exit code ``TIMED_OUT``."""

    def __init__(self, *, timeout: float | None = None) -> None:
        self.timeout = timeout
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def __call__(self, command: list[str], log: Path) -> int:
        """Run ``command`` to its end (or its time limit), stdout and stderr to ``log``."""
        with log.open("w") as stream:
            process = subprocess.Popen(
                command, stdout=stream, stderr=subprocess.STDOUT, preexec_fn=_default_sigint
            )
            with self._lock:
                self._live.add(process)
            try:
                return process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _stop(process)
                stream.write(f"\nfl-async bench: stopped after {self.timeout} s (--run-timeout)\n")
                return TIMED_OUT
            finally:
                with self._lock:
                    self._live.discard(process)

    def stop_all(self) -> None:
        """Send SIGINT to every run still going, then kill the ones that outlive the grace."""
        with self._lock:
            live = list(self._live)
        for process in live:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in live:
            _stop(process, signalled=True)


def _stop(process: subprocess.Popen, *, signalled: bool = False) -> None:
    """SIGINT (unless sent already), ``STOP_GRACE`` seconds to end, then SIGKILL."""
    if process.poll() is not None:
        return
    if not signalled:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_GRACE)


def _default_sigint() -> None:
    """A shell starts background jobs with SIGINT ignored, and Python then never raises
    KeyboardInterrupt: the launcher gets SIGINT's default back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within it, SIGTERM raises KeyboardInterrupt in the main thread (a suite stops its runs
    the same way on both); elsewhere than the main thread it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
