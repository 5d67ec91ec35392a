"""Run a few lines in a fresh Python process: what a check of imports needs, since the test
process has imported nearly everything already."""

from __future__ import annotations

import subprocess
import sys


def python_stdout(code: str, *args: str, timeout: float = 120.0) -> str:
    """The stdout of ``python -c code args...`` with this interpreter and environment; the test
    fails with the process's stderr when it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
