"""Checkpoints: a run's whole state in a versioned schema, written atomically.

``RunState`` names every field a resume needs; ``SCHEMA`` is raised whenever a field changes
meaning, and a checkpoint of another schema is refused with a message saying what to do,
instead of being half-read.

One run owns a checkpoint directory at a time: the one that started last. Each run claims it
by writing a lease file with a token of its own; a run that finds another token there has been
superseded (a new run resumed from its checkpoint while it was still alive) and stops before it
applies another update or writes anything.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fl_async.files import write_atomically

FILENAME = "fl-async-checkpoint.pkl"
LEASE = "fl-async-lease.json"
"""The owner of the directory: the run that claimed it last (token, process id, host, time)."""
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
    guard: dict[str, Any] | None = None
    """The update guard's window of accepted norms (None: saved before the guard existed)."""
    schema: int = field(default=SCHEMA)


class CheckpointError(ValueError):
    """A checkpoint that this version of fl-async cannot resume from."""


class RunSuperseded(RuntimeError):
    """Another run claimed this run's checkpoint directory; this one stops without writing."""


class Checkpointer:
    """Saves a ``RunState`` every ``every`` server steps into ``directory`` and loads it back."""

    def __init__(self, directory: str | Path, every: int | None) -> None:
        self.directory = Path(directory)
        self.every = every
        self.last_step = 0
        self._token: str | None = None
        self._lease_seen: tuple[int, int, int] | None = None

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self.directory / FILENAME

    @property
    def lease_path(self) -> Path:
        """The lease file naming the run that owns the directory."""
        return self.directory / LEASE

    def claim(self) -> None:
        """Make this run the directory's owner; a run that owned it before is superseded."""
        self._token = uuid.uuid4().hex  # not a modelling choice: no seed, unique per run
        owner = {"token": self._token, "pid": os.getpid(), "host": socket.gethostname(),
                 "claimed": time.time()}  # fmt: skip
        write_atomically(self.lease_path, json.dumps(owner))
        self._lease_seen = _stat_key(self.lease_path)

    def check_owner(self) -> None:
        """Raise ``RunSuperseded`` if a run claimed the directory after this one.

        One ``stat`` while the lease file is unchanged, so it is cheap enough for every update;
        a missing lease (the directory was removed by hand) is no other run's claim.
        """
        if self._token is None:
            return
        seen = _stat_key(self.lease_path)
        if seen is None or seen == self._lease_seen:
            return
        try:
            owner = json.loads(self.lease_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # removed or replaced between stat and read: looked at again next time
        if owner.get("token") == self._token:
            self._lease_seen = seen
            return
        raise RunSuperseded(
            f"another run (process {owner.get('pid')} on {owner.get('host')}, claimed at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(owner.get('claimed', 0)))}) "
            f"took over the checkpoint directory {self.directory}: this run stops without "
            f"applying another update or writing a checkpoint. One run owns a checkpoint "
            f"directory at a time, the one started last."
        )

    def due(self, version: int) -> bool:
        """Whether a checkpoint is due at server step ``version``."""
        return self.every is not None and version - self.last_step >= self.every

    def save(self, state: RunState, version: int) -> Path:
        """Write ``state`` atomically: a reader sees the old file or the new one, never half.

        ``RunSuperseded`` (nothing written) if another run owns the directory now.
        """
        self.check_owner()
        self.last_step = version
        write_atomically(self.path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
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


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is replaced (inode, modification time, size); None if absent."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size
