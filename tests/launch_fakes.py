"""Stand-ins for what the launcher starts (``flwr`` and the SuperLink), for tests of its plumbing
that start nothing real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fl_async.app import local_ray, superlink

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
"""A SuperLink that ignores SIGTERM, so that stopping it takes its grace period."""


def fake_flwr(bin_dir: Path, body: str) -> None:
    """An executable ``flwr`` in ``bin_dir`` (made if missing) that runs the Python ``body``."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "flwr").write_text(f"#!{sys.executable}\n{body}\n")
    (bin_dir / "flwr").chmod(0o755)


def write_status_script(output: Path, stopped_by: str = "budget") -> str:
    """Python lines that write, as the ServerApp does last, a finished ``run-status.json`` (and
    its ``history.json``) into ``output``."""
    history = {"stopped-by": stopped_by, "stop-detail": "", "num-updates": 8}
    return (
        "import json, pathlib\n"
        "from fl_async.app import run_status\n"
        f"out = pathlib.Path({str(output)!r}); out.mkdir(parents=True, exist_ok=True)\n"
        f"(out / 'history.json').write_text(json.dumps({history!r}))\n"
        f"status = run_status.finished({history!r}, [out / 'history.json'])\n"
        "run_status.write_run_status(out, status)\n"
    )


def fake_superlinks(
    monkeypatch, bin_dir: Path, script: str, *, settle: float = 0.0
) -> list[subprocess.Popen]:
    """Each SuperLink the launcher starts is ``python -c script``, returned after ``settle``
    seconds; ``bin_dir`` comes first on the launcher's ``PATH``. The processes started."""
    started: list[subprocess.Popen] = []

    def start_superlink(env, *, cwd, log_file):
        started.append(subprocess.Popen([sys.executable, "-c", script]))
        time.sleep(settle)
        return started[-1]

    monkeypatch.setattr(
        superlink, "environment", lambda: {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    )
    monkeypatch.setattr(superlink, "start_superlink", start_superlink)
    return started


class FakeHead:
    """Stands in for ``local_ray.RayHead``: records how it was started and stopped."""

    def __init__(self, actors, env, *, cwd, log_file, on_failure):
        self.address, self.failure, self.actors = "127.0.0.1:6390", None, actors
        self.temp_dir = str(cwd / "no-such-dir")
        self.stopped: dict | None = None
        self.on_failure = on_failure

    def stop(self, *, grace=None, keep_logs=False):
        self.stopped = {"grace": grace, "keep_logs": keep_logs}


def fake_heads(monkeypatch) -> list[FakeHead]:
    """``FakeHead`` in place of the launcher's Ray head; the heads made, in order."""
    made: list[FakeHead] = []

    def make(*args, **kwargs) -> FakeHead:
        made.append(FakeHead(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(local_ray, "RayHead", make)
    return made


def flwr_processes(
    monkeypatch, on_start: Callable[[subprocess.Popen], object] | None = None
) -> list[subprocess.Popen]:
    """Every ``flwr`` process started from now on, recorded as it starts (and handed to
    ``on_start``): its ``returncode`` tells a process the launcher stopped (``-SIGTERM``) from
    one that ran to its end (0)."""
    made: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            super().__init__(args, *rest, **kwargs)
            if isinstance(args, list | tuple) and args and args[0] == "flwr":
                made.append(self)
                if on_start is not None:
                    on_start(self)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    return made


def stop_graces(monkeypatch) -> list[float | None]:
    """The ``grace`` of each ``superlink.stop`` from now on (the real stop still runs)."""
    graces: list[float | None] = []
    real = superlink.stop

    def stop(process, *, grace=None, **kwargs):
        graces.append(grace)
        return real(process, grace=grace, **kwargs)

    monkeypatch.setattr(superlink, "stop", stop)
    return graces
