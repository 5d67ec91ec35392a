"""Stand-ins for what the launcher starts (``flwr`` and the SuperLink), for tests of its plumbing
that start nothing real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fl_async.app import superlink

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
"""A SuperLink that ignores SIGTERM, so that stopping it takes its grace period."""


def fake_flwr(bin_dir: Path, body: str) -> None:
    """An executable ``flwr`` in ``bin_dir`` (made if missing) that runs the Python ``body``."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "flwr").write_text(f"#!{sys.executable}\n{body}\n")
    (bin_dir / "flwr").chmod(0o755)


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
