"""``fl-async bench --export DIR``: a suite's raw results as a records folder.

Layout of a records folder::

    DIR/suite.json                        the suite's settings, commands and the runs it holds
    DIR/<split>/<strategy>-seed<s>.json   one record per finished run (fl_async.bench.records)

Every file is written with ``records.dumps`` (sorted keys, Python's float repr), so exporting an
unchanged suite again gives byte-identical files.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.records import (
    MACHINE_KEYS,
    RECORD_FORMAT,
    Records,
    dumps,
    record_path,
    split_records,
)
from fl_async.bench.report import load_runs
from fl_async.bench.runner import SUITE_FILE
from fl_async.validation import InvalidArgument

SUITE_FORMAT = "fl-async-bench-records/1"
"""The ``format`` of a records folder's ``suite.json`` (a suite folder's has none)."""


def is_records_folder(folder: Path) -> bool:
    """Whether ``folder`` is a records folder (its ``suite.json`` says so)."""
    path = folder / SUITE_FILE
    if not path.is_file():
        return False
    return json.loads(path.read_text()).get("format") == SUITE_FORMAT


def suite_settings(out: Path) -> dict[str, Any]:
    """The settings and commands of the suite folder ``out`` (empty when it has no suite.json),
    without the machine's paths."""
    path = out / SUITE_FILE
    if not path.is_file():
        return {"settings": None, "command": None, "calls": []}
    suite = json.loads(path.read_text())
    settings = dict(suite.get("latest") or {})
    settings["run-config"] = {
        k: v for k, v in (settings.get("run-config") or {}).items() if k not in MACHINE_KEYS
    }
    calls = [{"at": c.get("at"), "command": _command(c.get("argv") or [])} for c in suite["calls"]]
    return {
        "settings": settings,
        "command": calls[-1]["command"] if calls else None,
        "calls": calls,
    }


def _command(argv: list[str]) -> str:
    """The call as typed, with the path of the ``fl-async`` program as its name."""
    if len(argv) > 1 and argv[1] == "bench":
        argv = ["fl-async", *argv[1:]]
    return shlex.join(argv)


def export_suite(out: Path, dest: Path, grid_size: int = DEFAULT_GRID) -> list[Path]:
    """Write the records folder ``dest`` of the suite folder ``out``: ``suite.json`` and one
    record per finished run (G ``grid_size`` for a grid derived in a split with no recorded
    one). Record files of runs the suite no longer has are removed. The paths written."""
    if not out.is_dir():
        raise InvalidArgument(f"no suite folder {out}")
    if is_records_folder(out):
        raise InvalidArgument(f"{out} is a records folder already: export a suite folder")
    if dest.resolve() == out.resolve():
        raise InvalidArgument(f"--export {dest} is the suite folder: choose another folder")
    if (dest / SUITE_FILE).is_file() and not is_records_folder(dest):
        raise InvalidArgument(f"--export {dest} is a suite folder: choose another folder")
    runs = load_runs(out)
    if not runs:
        raise InvalidArgument(f"no finished run under {out}: nothing to export")
    records = {split: split_records(split_runs, grid_size) for split, split_runs in runs.items()}
    written = [_write(dest / SUITE_FILE, suite_file(out, records, grid_size))]
    for split, by_strategy in records.items():
        for strategy, by_seed in by_strategy.items():
            for seed, record in by_seed.items():
                path = record_path(dest, split, strategy, seed)
                identity = {"split": split, "strategy": strategy, "seed": seed}
                written.append(_write(path, {**identity, **record}))
    _remove_stale(dest, set(written))
    return written


def suite_file(out: Path, records: Mapping[str, Records], grid_size: int) -> dict[str, Any]:
    """The records folder's ``suite.json``: format, the suite's settings and commands, the G
    given for derived grids and the seeds recorded per split and strategy."""
    return {
        "format": SUITE_FORMAT,
        **suite_settings(out),
        "grid": grid_size,
        "records": {
            split: {strategy: sorted(by_seed) for strategy, by_seed in by_strategy.items()}
            for split, by_strategy in records.items()
        },
    }


def _write(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(dumps(value))
    os.replace(temporary, path)
    return path


def _remove_stale(dest: Path, keep: set[Path]) -> None:
    """Remove the record files of ``dest`` not written now (runs the suite no longer has);
    only files that are records, nothing else in the folder."""
    for path in dest.glob("*/*-seed*.json"):
        if path in keep:
            continue
        try:
            stale = json.loads(path.read_text()).get("format") == RECORD_FORMAT
        except (json.JSONDecodeError, AttributeError):
            stale = False
        if stale:
            path.unlink()
