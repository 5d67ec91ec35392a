"""Checkpoints: a run's whole state in a versioned schema, written atomically.

``RunState`` names every field a resume needs; ``SCHEMA`` is raised whenever a field changes
meaning, and a checkpoint of another schema is refused with a message saying what to do,
instead of being half-read.

The file is a state file (``fl_async.statefile``): plain values and numpy arrays with a
SHA-256 of the payload, read without running any code. The history (records and evaluations),
which grows with the run, is not in it since schema 4: each save appends its new entries to the
history journal beside it (``fl_async.strategies.journal``), and the file counts the journal's
bytes that are its own, so a save costs what changed, not the whole history again. A file
that is foreign, truncated, corrupted or of another schema is refused with one line naming it
and what to do, and left in place. Checkpoints of fl-async before schema 3 were pickles; one
found in the directory is refused the same way and never unpickled (unpickling a file can run
any code in it).

One run owns a checkpoint directory at a time: the one that started last. Each run claims it
by writing a lease file with a token of its own; a run that finds another token there has been
superseded (a new run resumed from its checkpoint while it was still alive) and stops before it
applies another update or writes anything.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_async import statefile
from fl_async.files import write_atomically
from fl_async.strategies.journal import TABLES, Journal, JournalError

if TYPE_CHECKING:
    from fl_async.strategies.tasks import Task

FILENAME = "fl-async-checkpoint.state"
PICKLED = "fl-async-checkpoint.pkl"
"""The checkpoint file of schemas 1 and 2 (a pickle): refused, never read."""
FORMAT = "fl-async-checkpoint"
LEASE = "fl-async-lease.json"
"""The owner of the directory: the run that claimed it last (token, process id, host, time)."""
SCHEMA = 4
"""Schema 4 keeps the history in the journal; 3 was one state file holding it too (still read);
2 a pickled ``RunState``, 1 a pickled dict of tuples (refused)."""
READABLE = (3, SCHEMA)
WHAT_TO_DO = (
    "delete it (or move it away) to start afresh, or give the run another checkpoint directory "
    "(the app: another output-dir)"
)


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

    @classmethod
    def of(cls, task: Task, base: list[np.ndarray]) -> SavedTask:
        """``task`` as a checkpoint holds it, with the model ``base`` it was sent."""
        return cls(
            task.stable_id,
            task.base_version,
            task.iteration,
            task.task_index,
            task.seed,
            task.start,
            task.finish,
            base,
            task.base is not None,
        )


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
    train_metrics: Mapping[int, Mapping[str, Any]]
    """The history tables (these three): the recorder's own at a save, which writes only the
    entries it has not written before; plain dicts after a load."""
    evaluate_metrics: Mapping[int, Mapping[str, Any]]
    grid_metrics: Mapping[int, Mapping[str, Any]]
    guard: dict[str, Any] | None = None
    """The update guard's window of accepted norms (None: saved before the guard existed)."""
    settings: dict[str, int] | None = None
    """``eval_every`` and ``patience`` as the run resolved them at its start (None: saved
    before they were kept; the resume resolves them again)."""
    wall: float | None = None
    """Seconds the run had run when the checkpoint was written, over every run it resumed
    (None: saved before fl-async kept it; a resumed run's wall times then start from 0)."""
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
        self._journal = Journal(self.directory)
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
        owner = {
            "token": self._token,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "claimed": time.time(),
        }
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
        history = self._journal.append({name: getattr(state, name) for name in TABLES})
        write_atomically(self.path, statefile.dumps(_file_tree(state, history)))
        return self.path

    def load(self) -> RunState | None:
        """The saved state, None when there is none; ``CheckpointError`` (one line naming the
        file and what to do; the file left as it is) when it cannot be resumed."""
        pickled = self.directory / PICKLED
        if pickled.exists():
            raise CheckpointError(
                f"{pickled} is a checkpoint of an older fl-async, stored with pickle, which "
                f"cannot be resumed safely (reading a pickle can run any code in it), so it was "
                f"not read: {WHAT_TO_DO}"
            )
        if not self.path.exists():
            return None
        try:
            return from_tree(statefile.loads(self.path.read_bytes()), self._journal)
        except (OSError, statefile.StateFileError, JournalError) as error:
            reason = error.strerror if isinstance(error, OSError) else str(error)
            raise CheckpointError(
                f"cannot resume from {self.path}: {reason}; {WHAT_TO_DO}"
            ) from None


def to_tree(state: RunState) -> dict[str, Any]:
    """``state`` as one tree of plain values and arrays, its history included: the layout of a
    schema-3 file, which ``from_tree`` reads without a journal."""
    values = _values(state, schema=3)
    for name in TABLES:
        values[name] = {k: dict(v) for k, v in getattr(state, name).items()}
    return {"format": FORMAT, "schema": 3, "state": values}


def _file_tree(state: RunState, history: dict[str, Any]) -> dict[str, Any]:
    """What the checkpoint file holds: ``state`` but its history, and the journal's count."""
    values = _values(state, schema=SCHEMA)
    return {"format": FORMAT, "schema": SCHEMA, "state": values, "history": history}


def _values(state: RunState, schema: int) -> dict[str, Any]:
    """``state``'s fields but the history as plain values, under ``schema``."""
    values = {f.name: getattr(state, f.name) for f in fields(state) if f.name not in TABLES}
    values["nodes"] = {k: _plain(node) for k, node in state.nodes.items()}
    values["in_flight"] = [_plain(task) for task in state.in_flight]
    values["schema"] = schema
    return values


def from_tree(tree: Any, journal: Journal | None = None) -> RunState:
    """The ``RunState`` that ``to_tree`` (or a save, with its history in ``journal``) turned
    into ``tree``; ``StateFileError`` or ``JournalError`` otherwise."""
    if not isinstance(tree, dict) or tree.get("format") != FORMAT:
        raise statefile.StateFileError("it is a state file, but not an fl-async checkpoint")
    if tree.get("schema") not in READABLE:
        raise statefile.StateFileError(
            f"it was written with checkpoint schema {tree.get('schema')!r}; this fl-async reads "
            f"schemas {' and '.join(map(str, READABLE))} only (the fl-async version that wrote "
            "it can resume it)"
        )
    values = tree.get("state")
    if tree["schema"] >= 4 and isinstance(values, dict):
        if journal is None:
            raise JournalError("its history is in a journal, and none was given")
        values = {**values, **journal.read(tree.get("history"))}
    values = _fields_of(RunState, values)
    if not isinstance(values["nodes"], dict) or not isinstance(values["in_flight"], list):
        raise statefile.StateFileError("its nodes or tasks in flight are not a dict and a list")
    values["nodes"] = {k: SavedNode(**_fields_of(SavedNode, v)) for k, v in values["nodes"].items()}
    values["in_flight"] = [SavedTask(**_fields_of(SavedTask, t)) for t in values["in_flight"]]
    return RunState(**values)


def _plain(item: SavedNode | SavedTask) -> dict[str, Any]:
    return {f.name: getattr(item, f.name) for f in fields(item)}


def _fields_of(kind: type, values: Any) -> dict[str, Any]:
    """``values`` if it is a dict with the fields of dataclass ``kind``: all of them but those
    with a default, which a file written before they existed leaves out."""
    names = {f.name for f in fields(kind)}
    needed = {f.name for f in fields(kind) if f.default is MISSING}
    if not isinstance(values, dict) or not needed <= set(values) <= names:
        got = sorted(map(str, values)) if isinstance(values, dict) else type(values).__name__
        raise statefile.StateFileError(
            f"its {kind.__name__} does not have the expected fields (got {got})"
        )
    return values


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is replaced (inode, modification time, size); None if absent."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size
