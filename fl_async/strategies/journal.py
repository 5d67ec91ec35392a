"""A checkpoint's history journal: the run's records and evaluations, each written once.

A run's history grows with every reply. Written whole into every checkpoint, it made each save
cost as much as the history so far, so a long run's checkpoints cost the square of its length.
The journal (``fl-async-history.state``, beside the checkpoint file) is a sequence of state files
(``fl_async.statefile``), each holding the entries added since the one before; the checkpoint
file counts the journal's bytes that belong to it. A save appends one part and syncs it before
the checkpoint file that counts it replaces the old one, so a crash between the two leaves bytes
past the count: a load reads only the counted bytes, and the next save cuts the rest off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from fl_async import statefile

JOURNAL = "fl-async-history.state"
TABLES = ("train_metrics", "evaluate_metrics", "grid_metrics")
"""The ``RunState`` fields the journal holds: tables that only ever grow, in insertion order."""


class JournalError(ValueError):
    """A journal that does not hold the history its checkpoint counts."""


class Journal:
    """Appends the new entries of the history tables; reads back the part a checkpoint counts."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL
        self.size = 0
        """Bytes of the journal the last checkpoint counts (what the next part follows)."""
        self.counts = dict.fromkeys(TABLES, 0)
        """Entries of each table those bytes hold."""

    def append(self, tables: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> dict[str, Any]:
        """Write the entries of ``tables`` past ``counts`` as one part (after cutting off what no
        checkpoint counts) and sync it; returns what the checkpoint counts, to go into it."""
        new = {
            name: {k: dict(v) for k, v in islice(tables[name].items(), self.counts[name], None)}
            for name in TABLES
        }
        part = statefile.dumps(new)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as stream:
            stream.truncate(self.size)
            stream.write(part)
            stream.flush()
            os.fsync(stream.fileno())
        self.size += len(part)
        for name in TABLES:
            self.counts[name] += len(new[name])
        return {"bytes": self.size, "entries": dict(self.counts)}

    def read(self, counted: Any) -> dict[str, dict[int, dict[str, Any]]]:
        """The tables held by the journal's first ``counted["bytes"]`` bytes, checked against
        the entries ``counted`` says they hold; ``JournalError`` saying what is wrong."""
        size, entries = _counted(counted)
        try:
            with open(self.path, "rb") as stream:
                data = stream.read(size)
        except FileNotFoundError:
            raise JournalError(f"its history journal {self.path} is missing") from None
        except OSError as error:
            raise JournalError(
                f"cannot read its history journal {self.path}: {error.strerror}"
            ) from None
        if len(data) < size:
            raise JournalError(
                f"its history journal {self.path} has {len(data)} bytes, fewer than the {size} "
                f"the checkpoint counts"
            )
        try:
            parts = statefile.loads_all(data)
        except statefile.StateFileError as error:
            raise JournalError(f"its history journal {self.path}: {error}") from None
        tables = _joined(parts, self.path)
        got = {name: len(table) for name, table in tables.items()}
        if got != entries:
            raise JournalError(
                f"its history journal {self.path} holds {got} entries, the checkpoint counts "
                f"{entries}"
            )
        self.size, self.counts = size, got
        return tables


def _counted(counted: Any) -> tuple[int, dict[str, int]]:
    """The byte and entry counts a checkpoint gives, checked."""
    if isinstance(counted, dict) and type(counted.get("bytes")) is int:
        entries = counted.get("entries")
        if (
            counted["bytes"] >= 0
            and isinstance(entries, dict)
            and set(entries) == set(TABLES)
            and all(type(n) is int and n >= 0 for n in entries.values())
        ):
            return counted["bytes"], dict(entries)
    raise JournalError(f"its count of the history journal is unreadable: {str(counted)[:80]}")


def _joined(parts: list[Any], path: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """The parts' tables, each part's entries after those of the parts before it."""
    tables: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in TABLES}
    for number, part in enumerate(parts, start=1):
        if not isinstance(part, dict) or set(part) != set(TABLES):
            raise JournalError(f"its history journal {path}: part {number} is not a history part")
        for name in TABLES:
            entries = part[name]
            if not isinstance(entries, dict) or not all(
                type(k) is int and isinstance(v, dict) for k, v in entries.items()
            ):
                raise JournalError(
                    f"its history journal {path}: part {number}'s {name} is not a table of "
                    "records by number"
                )
            tables[name].update(entries)
    return tables
