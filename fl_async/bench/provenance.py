"""What made a suite's runs, kept in each run's ``bench-run.json`` and record: the code (its git
commit, or "dirty" with a hash of the uncommitted diff), how the runs were made (the engine and
runs at a time) and the actors. The package versions and the CPU kind come with the run's own
history (``versions``, ``machine``)."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding ``fl_async`` (when it is one)."""


def run_provenance(*, engine: str, runs_at_a_time: int, actors: int | None) -> dict[str, Any]:
    """The provenance of a suite's runs made now with these settings."""
    return {
        **code_version(),
        "engine": engine,
        "runs-at-a-time": runs_at_a_time,
        "actors": actors,
    }


@functools.cache
def code_version(root: Path = _ROOT) -> dict[str, Any]:
    """``commit`` (git's, of ``root``), ``dirty`` and, when dirty, ``diff-sha256`` of
    ``git diff HEAD``; without git or a checkout, the installed ``fl-async`` version only."""
    version = {"fl-async": _installed_version()}
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {**version, "commit": None}
    diff = _git(root, "diff", "HEAD", "--", ".") or ""
    untracked = _git(root, "ls-files", "--others", "--exclude-standard") or ""
    dirty = bool(diff or untracked)
    found = {**version, "commit": commit.strip(), "dirty": dirty}
    if dirty:
        found["diff-sha256"] = hashlib.sha256((diff + untracked).encode()).hexdigest()
    return found


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _installed_version() -> str:
    try:
        return metadata.version("fl-async")
    except metadata.PackageNotFoundError:
        return "not installed"
