"""``fl-async bench --export DIR``: a suite's raw results as a records folder.

Layout of a records folder::

    DIR/suite.json                        the suite's settings, commands and the runs it holds
    DIR/<split>/<strategy>-seed<s>.json   one record per finished run (fl_async.bench.records)

Every file is written with ``records.dumps`` (sorted keys, Python's float repr), so exporting an
unchanged suite again gives byte-identical files.

A suite run in parts (other seeds on another machine or in another session) is added to an
existing records folder with ``--export DIR --merge``: the part's settings must equal the
folder's but for its seeds, splits, strategies and variants; records already in the folder are
kept, never replaced, and only the runs it lacks are written.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.records import (
    MACHINE_KEYS,
    RECORD_FORMAT,
    Records,
    config_differences,
    dumps,
    load_records,
    record_path,
    split_records,
)
from fl_async.bench.report import load_runs
from fl_async.bench.runner import SUITE_FILE
from fl_async.files import read_json, write_atomically
from fl_async.validation import InvalidArgument

SUITE_FORMAT = "fl-async-bench-records/1"
"""The ``format`` of a records folder's ``suite.json`` (a suite folder's has none)."""
EXTENSIBLE_SETTINGS = ("seeds", "splits", "strategies", "variants")
"""The settings a merge may extend (the folder keeps their union); every other must be equal."""


def is_records_folder(folder: Path) -> bool:
    """Whether ``folder`` is a records folder (its ``suite.json`` says so)."""
    path = folder / SUITE_FILE
    if not path.is_file():
        return False
    return read_json(path, "suite file").get("format") == SUITE_FORMAT


def read_records(folder: Path, grid_size: int) -> dict[str, Records]:
    """A records folder's records, or those of a suite folder's finished runs on a grid of
    ``grid_size`` points, by split."""
    if is_records_folder(folder):
        return load_records(folder)
    return {split: split_records(runs, grid_size) for split, runs in load_runs(folder).items()}


def suite_settings(out: Path) -> dict[str, Any]:
    """The settings and commands of the suite folder ``out`` (empty when it has no suite.json),
    without the machine's paths."""
    path = out / SUITE_FILE
    if not path.is_file():
        return {"settings": None, "command": None, "calls": []}
    suite = read_json(path, "suite file")
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
    records = _suite_records(out, dest, grid_size)
    written = [_write(dest / SUITE_FILE, suite_file(out, records, grid_size))]
    written += _write_records(dest, records)
    _remove_stale(dest, set(written))
    return written


def merge_suite(
    out: Path, dest: Path, grid_size: int = DEFAULT_GRID
) -> tuple[list[Path], list[str]]:
    """Add the finished runs of the suite folder ``out`` that the records folder ``dest`` lacks.

    The suite's settings must equal ``dest``'s but for ``EXTENSIBLE_SETTINGS``; a run already
    in ``dest`` keeps its record (a committed result never changes under a merge) and is named
    in the notes, which say whether the new run's grid accuracies equal the kept ones. Returns
    the paths written (``suite.json`` first) and the notes."""
    if not is_records_folder(dest):
        raise InvalidArgument(
            f"--merge: {dest} is not a records folder; export the first part without --merge"
        )
    records = _suite_records(out, dest, grid_size)
    existing = load_records(dest)
    kept, notes = _kept_records(records, existing)
    old = read_json(dest / SUITE_FILE, "suite file", keys=("settings",))
    new = suite_file(out, records, grid_size)
    merged = {
        "format": SUITE_FORMAT,
        "settings": _merged_settings(old["settings"], new["settings"]),
        "command": new["command"],
        "calls": old["calls"] + [call for call in new["calls"] if call not in old["calls"]],
        "grid": _equal_setting("grid", old["grid"], new["grid"]),
        "records": _merged_seeds(old["records"], new["records"]),
    }
    fresh = {
        split: {
            strategy: {s: r for s, r in by_seed.items() if (split, strategy, s) not in kept}
            for strategy, by_seed in by_strategy.items()
        }
        for split, by_strategy in records.items()
    }
    written = [_write(dest / SUITE_FILE, merged), *_write_records(dest, fresh)]
    return written, notes


def _suite_records(out: Path, dest: Path, grid_size: int) -> dict[str, Records]:
    """The records of ``out``'s finished runs, after checking ``out`` and ``dest`` are usable."""
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
    return {split: split_records(split_runs, grid_size) for split, split_runs in runs.items()}


def _write_records(dest: Path, records: Mapping[str, Records]) -> list[Path]:
    """Write one record file per run of ``records``; the paths written."""
    written = []
    for split, by_strategy in records.items():
        for strategy, by_seed in by_strategy.items():
            for seed, record in by_seed.items():
                path = record_path(dest, split, strategy, seed)
                identity = {"split": split, "strategy": strategy, "seed": seed}
                written.append(_write(path, {**identity, **record}))
    return written


def _kept_records(
    records: Mapping[str, Records], existing: Mapping[str, Records]
) -> tuple[set[tuple[str, str, int]], list[str]]:
    """The runs of ``records`` that ``existing`` holds already, and a note for each."""
    kept, notes = set(), []
    for split, by_strategy in records.items():
        for strategy, by_seed in by_strategy.items():
            for seed, record in by_seed.items():
                old = existing.get(split, {}).get(strategy, {}).get(seed)
                if old is None:
                    continue
                differing = config_differences(old["config"], record["config"])
                if differing:
                    raise InvalidArgument(
                        f"--merge: {split}/{strategy}-seed{seed} is in both with different run "
                        f"configs ({', '.join(differing)})"
                    )
                kept.add((split, strategy, seed))
                same = _accuracies(old) == _accuracies(record)
                notes.append(
                    f"{split}/{strategy}-seed{seed}: kept the record already there; the new "
                    f"run's grid accuracies are {'identical' if same else 'different'}"
                )
    return kept, notes


def _accuracies(record: Mapping[str, Any]) -> list[float] | None:
    grid = record.get("grid")
    return None if grid is None else [point["accuracy"] for point in grid["evaluations"]]


def _merged_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with the union of each extensible setting; InvalidArgument if another differs, or
    if a variant's name stands for another preset or overrides in the two."""
    differing = [key for key in _differing(old, new) if key not in EXTENSIBLE_SETTINGS]
    if differing:
        raise InvalidArgument(
            f"--merge: the suite's settings differ from the records folder's in "
            f"{', '.join(differing)} (only {', '.join(EXTENSIBLE_SETTINGS)} may differ)"
        )
    merged = dict(old)
    for key in ("seeds", "splits", "strategies"):
        before = list(old.get(key) or [])
        merged[key] = before + [value for value in new.get(key) or [] if value not in before]
    merged["seeds"] = sorted(merged["seeds"])
    variants = {**(old.get("variants") or {})}
    for name, variant in (new.get("variants") or {}).items():
        if variants.setdefault(name, variant) != variant:
            raise InvalidArgument(
                f"--merge: variant {name!r} is {variant} in the suite, {variants[name]} in the "
                "folder: give the new one another name"
            )
    if variants:
        merged["variants"] = variants
    return merged


def _merged_seeds(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The ``records`` index of both: split -> strategy -> sorted seeds."""
    merged: dict[str, dict[str, list[int]]] = {}
    for index in (old, new):
        for split, by_strategy in index.items():
            for strategy, seeds in by_strategy.items():
                union = set(merged.setdefault(split, {}).get(strategy, [])) | set(seeds)
                merged[split][strategy] = sorted(union)
    return merged


def _equal_setting(name: str, old: Any, new: Any) -> Any:
    if old != new:
        raise InvalidArgument(f"--merge: {name} is {new!r} in the suite, {old!r} in the folder")
    return old


def _differing(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between ``old`` and ``new`` (either missing counts)."""
    return sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))


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
    return write_atomically(path, dumps(value))


def _remove_stale(dest: Path, keep: set[Path]) -> None:
    """Remove the record files of ``dest`` not written now (runs the suite no longer has);
    only files that are records, nothing else in the folder."""
    for path in dest.glob("*/*-seed*.json"):
        if path in keep:
            continue
        try:
            stale = read_json(path, "bench record").get("format") == RECORD_FORMAT
        except InvalidArgument:
            stale = False  # not a record: not ours to remove
        if stale:
            path.unlink()
