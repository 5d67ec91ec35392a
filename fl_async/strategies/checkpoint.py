"""Atomic checkpoints of a run's whole state (one pickle file, replaced in one step)."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

FILENAME = "fl-async-checkpoint.pkl"


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory`` atomically: a reader sees the old file or the new one."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FILENAME
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_checkpoint(directory: str | Path) -> dict[str, Any] | None:
    """The state saved in ``directory``, or None when there is none."""
    target = Path(directory) / FILENAME
    if not target.exists():
        return None
    with target.open("rb") as f:
        return pickle.load(f)
