"""The generated blocks made from records folders (``fl-async bench --export``), for
``benchmarks/blocks.py``, which finds every block of a Markdown file and writes what this
module makes between its markers.

A block runs from a start marker to the next ``<!-- end generated -->``::

    <!-- generated from benchmarks/results/suites/a -->
    ... (the tables of every split of that records folder)
    <!-- end generated -->

``split=NAME`` after the path keeps one split. ``generated verdict from`` gives the claims'
verdicts (several folders, ``verdict``), ``generated claims from`` the claims table of the
claims study (several folders, ``table``), ``generated tuned from`` a sweep's default and chosen
points (``tuned_table``). Paths are relative to the repository root (docs/bench.md, "Raw results
and generated tables").
"""

from __future__ import annotations

import re
from pathlib import Path

from fl_async.bench.export import is_records_folder
from fl_async.bench.records import load_records
from fl_async.bench.report import sorted_records, split_tables
from fl_async.bench.runner import SUITE_FILE
from fl_async.files import read_json
from fl_async.validation import InvalidArgument

from .table import claims_lines, read_splits
from .tuned_table import read_tuned, tuned_lines
from .verdict import records_per_run, verdict_lines

START = re.compile(
    r"^<!-- generated (?:(?P<kind>verdict|tuned|claims) )?"
    r"from (?P<source>\S+(?: \S+)*?)"
    r"(?: split=(?P<split>\S+))? -->$"
)
END = "<!-- end generated -->"
TABLES = "generated"
"""The kind of a block of a records folder's tables (the other kinds are named in its marker)."""


def kind_of(found: re.Match[str]) -> str:
    """The kind of the block whose start marker ``START`` matched as ``found``; InvalidArgument
    when the marker names what its kind does not take."""
    kind = found["kind"] or TABLES
    if kind in (TABLES, "tuned") and " " in found["source"]:
        raise InvalidArgument(f"one records folder per table block, got {found['source']!r}")
    if kind in ("tuned", "claims") and found["split"]:
        raise InvalidArgument(f"a {kind} block covers every split")
    return kind


def marker(kind: str, source: str, split: str | None) -> str:
    """The start marker of a block of ``kind`` from ``source`` (``split``: one split)."""
    named = "" if kind == TABLES else f"{kind} "
    return f"<!-- generated {named}from {source}{f' split={split}' if split else ''} -->"


def content(kind: str, source: str, split: str | None, root: Path) -> list[str]:
    """The lines between the markers of a block of ``kind`` made from the records folder(s)
    ``source`` (relative to ``root``); InvalidArgument when one cannot be read."""
    if kind == "verdict":
        return _verdict(source, split, root)
    if kind == "claims":
        return _claims(source, root)
    if kind == "tuned":
        return tuned_lines(read_tuned(_records_folder(source, root)))
    records = sorted_records(load_records(_records_folder(source, root)))
    if split is not None and split not in records:
        raise InvalidArgument(f"no split {split!r} there; recorded: {', '.join(records)}")
    splits = [split] if split is not None else list(records)
    return "\n\n".join(split_tables(name, records[name]) for name in splits).split("\n")


def _records_folder(source: str, root: Path) -> Path:
    """The records folder ``source`` (relative to ``root``), checked."""
    if Path(source).is_absolute():
        raise InvalidArgument(f"{source}: the path must be relative to the repository root")
    folder = root / source
    if not is_records_folder(folder):
        raise InvalidArgument(f"{folder} is not a records folder (made by fl-async bench --export)")
    return folder


def _verdict(sources: str, split: str | None, root: Path) -> list[str]:
    folders = []
    for source in sources.split(" "):
        per_split = records_per_run(load_records(_records_folder(source, root)))
        if split is not None:
            if split not in per_split:
                raise InvalidArgument(
                    f"no split {split!r} in {source}; recorded: {', '.join(per_split)}"
                )
            per_split = {split: per_split[split]}
        folders.append((Path(source).name, per_split))
    return verdict_lines(folders)


def _claims(sources: str, root: Path) -> list[str]:
    splits = []
    for source in sources.split(" "):
        folder = _records_folder(source, root)
        planned = read_json(folder / SUITE_FILE, "a records folder's suite.json").get("settings")
        splits += read_splits(Path(source).name, load_records(folder), planned)
    return claims_lines(splits)
