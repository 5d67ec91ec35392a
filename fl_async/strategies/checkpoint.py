"""Checkpoints: a run's whole state in a versioned schema, written atomically.

``RunState`` names every field a resume needs; ``SCHEMA`` is raised whenever a field changes
meaning, and a checkpoint of another schema is refused with a message saying what to do,
instead of being half-read.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FILENAME = "fl-async-checkpoint.pkl"
SCHEMA = 2
"""Schema 1 was a plain dict of positional tuples (fl-async 0.1 before the runtime rebuild)."""


@dataclass
class SavedTask:
    """A task in flight at the checkpoint; a resume sends it again exactly as it was."""

    stable_id: int
    base_version: int
    iteration: int
    task_index: int
    seed: int
    start: float
    finish: float
    base: list[np.ndarray]
    own_base: bool
    """Whether ``base`` was the task's own (a compensated base), not the global version."""


@dataclass
class SavedNode:
    """What the registry knew of a node."""

    partition_id: int | None
    num_examples: int | None
    tasks: int


@dataclass
class RunState:
    """Everything a run needs to resume bit for bit."""

    keys: list[str]
    aggregator: dict[str, Any]
    policy: dict[str, Any]
    clock: dict[str, Any] | None
    order: dict[str, float]
    task_bases: dict[str, Any]
    num_updates: int
    num_replies: int
    faults: dict[str, int]
    last_eval_step: int
    train_config: dict[str, Any]
    nodes: dict[int, SavedNode]
    forget_at: dict[int, int]
    in_flight: list[SavedTask]
    train_metrics: dict[int, dict[str, Any]]
    evaluate_metrics: dict[int, dict[str, Any]]
    grid_metrics: dict[int, dict[str, Any]]
    schema: int = field(default=SCHEMA)


class CheckpointError(ValueError):
    """A checkpoint that this version of fl-async cannot resume from."""


class Checkpointer:
    """Saves a ``RunState`` every ``every`` server steps into ``directory`` and loads it back."""

    def __init__(self, directory: str | Path, every: int | None) -> None:
        self.directory = Path(directory)
        self.every = every
        self.last_step = 0

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self.directory / FILENAME

    def due(self, version: int) -> bool:
        """Whether a checkpoint is due at server step ``version``."""
        return self.every is not None and version - self.last_step >= self.every

    def save(self, state: RunState, version: int) -> Path:
        """Write ``state`` atomically: a reader sees the old file or the new one, never half."""
        self.last_step = version
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".checkpoint-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.path

    def load(self) -> RunState | None:
        """The saved state, None when there is none; ``CheckpointError`` for another schema."""
        if not self.path.exists():
            return None
        with self.path.open("rb") as f:
            state = pickle.load(f)
        schema = state.schema if isinstance(state, RunState) else 1
        if schema != SCHEMA:
            raise CheckpointError(
                f"{self.path} was written with checkpoint schema {schema}; this fl-async reads "
                f"schema {SCHEMA} only. Resume it with the fl-async version that wrote it, or "
                f"start a new run in another directory."
            )
        return state
