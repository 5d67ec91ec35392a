"""Compact records: one finished run as a small JSON file the report can be computed from.

A run's ``history.json`` holds every update and is not committed; its record keeps what the
report reads (the run config, the comparison grid, a summary, the updates per node) in a few KB,
so a suite's raw results can live in the repository and its tables be generated from them
(docs/bench.md, "Raw results and generated tables"). The report itself goes through records:
``split_records`` turns histories into records first, so a suite folder and a records folder give
the same figures.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fl_async.bench import metrics
from fl_async.bench.grid import (
    DEFAULT_GRID,
    RECORDED,
    Grid,
    budget_of,
    grid_note,
    grid_points,
    split_grid_size,
)
from fl_async.bench.scenarios import STABILITY_BASELINE, STRATEGIES, is_run_name
from fl_async.config import DEFAULTS
from fl_async.files import read_json
from fl_async.validation import InvalidArgument

RECORD_FORMAT = "fl-async-bench-record/1"
"""The ``format`` of a record file; a reader refuses any other."""
GRID_KEYS = ("index", "virtual-time", "wall-time", "accuracy", "loss", "server-step")
"""What a record keeps of each grid point."""
RUN_INFO = (
    "num-nodes",
    "started-at",
    "versions",
    "machine",
    "strategy",
    "dataset",
    "model",
    "partitions",
    "provenance",
)
"""The history's descriptions of the run kept in a record (each a few values); ``provenance``
comes from the run's ``bench-run.json`` (``with_provenance``)."""
MACHINE_KEYS = ("output-dir", "data-root", "data-download")
"""Run-config keys left out of a record: the paths of the machine that ran it and whether it
fetched its data, not settings of the run."""
ENDED_BY_ITS_RULE = frozenset({"no-active-nodes", "no-progress", "deadlock"})
"""The stops (of ``FAILED_STOPS``) a run reaches by its own rule: its updates rejected until every
node left or none was accepted, or its dispatch policy letting no node start. (``no-nodes``, no
node taking a task within the timeout, is the machine's.)"""
_LINE = 200
"""A container with no nested one whose JSON fits in this many characters takes one line."""

History = Mapping[str, Any]
Record = dict[str, Any]
Records = dict[str, dict[int, Record]]
"""strategy -> seed -> record, for one split."""


def make_record(history: History, grid_size: int = DEFAULT_GRID) -> Record:
    """The record of one run; ``grid_size`` is G of its grid when derived (SSGD's)."""
    record = {
        "format": RECORD_FORMAT,
        "config": run_config(history.get("config", {})),
        "run": {key: history[key] for key in RUN_INFO if key in history},
        "grid": _grid_section(history, grid_size),
        "summary": summary(history),
        "node-updates": node_updates(history.get("updates", [])),
    }
    # Through JSON and back: a record in memory equals the one read from its file.
    return json.loads(dumps(record))


def run_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run config a record keeps: every key but the machine's paths and the other
    strategies' hyperparameters (``gsgm.*`` of an ASGD run: unread, about half the keys)."""
    strategy = config.get("strategy")
    return {
        key: value
        for key, value in config.items()
        if key not in MACHINE_KEYS
        and not (key.partition(".")[0] in STRATEGIES and key.partition(".")[0] != strategy)
    }


BEFORE_THE_KEY: dict[str, Any] = {"weight-cap": 0.0}
"""Keys added with a default that changes what some runs compute, and the value that says what
every run did before the key existed: no cap on a node's sample-count weight (the cap binds on
heavy-tailed splits, such as Synthetic's devices)."""


def setting(config: Mapping[str, Any], key: str, *, recorded: bool = True) -> Any:
    """``key``'s value in a record's run config (``recorded``), or in a run config about to run
    (not ``recorded``: a missing key takes today's default). A key a record lacks was added to
    the schema after its run was made: the run did what ``BEFORE_THE_KEY`` says, else what the
    key's default does (a key is otherwise only added with a default that keeps what runs did
    before; None for a key the schema does not know)."""
    if key in config:
        return config[key]
    if recorded and key in BEFORE_THE_KEY:
        return BEFORE_THE_KEY[key]
    return DEFAULTS.get(key)


def config_differences(
    old: Mapping[str, Any], new: Mapping[str, Any], *, new_is_record: bool = True
) -> list[str]:
    """The run-config keys whose settings differ between the record ``old`` and ``new``, a
    record or (not ``new_is_record``) a run config about to run (``setting``), sorted."""
    return sorted(
        k for k in set(old) | set(new) if setting(old, k) != setting(new, k, recorded=new_is_record)
    )


def machines_line(records: Records) -> list[str]:
    """A line naming the kinds of CPU the runs were made on and how many on each, where the
    records name them (runs made before the history named its CPU are left out of it)."""
    kinds = Counter(
        f"{machine['cpu']} ({machine['cpu-capability']})"
        if machine.get("cpu-capability")
        else machine["cpu"]
        for by_seed in records.values()
        for record in by_seed.values()
        if (machine := record["run"].get("machine") or {}).get("cpu")
    )
    if not kinds:
        return []
    shown = ", ".join(f"{count} on {kind}" for kind, count in sorted(kinds.items()))
    return [f"Runs made: {shown}."]


def busiest_node_line(records: Records) -> list[str]:
    """A line giving, per seed of ASGD's runs, the examples held by the node that sent the most
    replies and its share of them: how far one node's speed dominated the seed (a node with
    few examples finishes its tasks soonest under the virtual clock)."""
    shown = []
    for seed, record in sorted(records.get(STABILITY_BASELINE, {}).items()):
        counts = {int(k): n for k, n in (record.get("node-updates") or {}).items() if k.isdigit()}
        sizes = (record["run"].get("partitions") or {}).get("sizes") or []
        if not counts or not sizes:
            continue
        busiest = max(counts, key=lambda node: (counts[node], -node))
        if busiest >= len(sizes):  # a node id that names no partition (a deployment's)
            continue
        share = counts[busiest] / sum(counts.values())
        shown.append(f"seed {seed}: {sizes[busiest]}, {100 * share:.0f}%")
    if not shown:
        return []
    return [
        f"Busiest node of ASGD's runs (examples it held, its share of the replies): "
        f"{'; '.join(shown)}."
    ]


def made_with(record: Record, config: Mapping[str, Any]) -> bool:
    """Whether ``record`` is of a run made with the run config ``config``: the machine's paths
    and the tracking keys aside, which change where a run is written and logged, not what it
    computes."""

    def compared(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in run_config(values).items() if not k.startswith("tracking.")}

    return not config_differences(compared(record["config"]), compared(config), new_is_record=False)


def _grid_section(history: History, grid_size: int) -> dict[str, Any] | None:
    """The grid's source, G, budget T and points (recorded, or derived from the evaluations)."""
    found = grid_points(history, grid_size)
    if found is None:
        return None
    source, size, points = found
    ordered = sorted(points, key=lambda p: int(p["index"]))
    return {
        "source": source,
        "size": size,
        "budget": budget_of(history),
        "evaluations": [{key: p.get(key) for key in GRID_KEYS} for p in ordered],
    }


def summary(history: History) -> dict[str, Any]:
    """The run's totals: how it ended, its counts, faults, rejections and staleness."""
    updates = history.get("updates", [])
    applied, rejected = metrics.update_counts(updates)
    mean_staleness, max_staleness = metrics.staleness_stats(updates)
    evaluations = [e for e in history.get("evaluations", []) if e.get("accuracy") is not None]
    final = history.get("final-accuracy")
    return {
        "final-accuracy": evaluations[-1]["accuracy"] if final is None and evaluations else final,
        "num-updates": history.get("num-updates"),
        "server-steps": history.get("server-steps"),
        "virtual-time": history.get("virtual-time"),
        "wall-time": history.get("wall-time"),
        "stopped-by": history.get("stopped-by"),
        "faults": dict(history.get("faults") or {}),
        "rejected": dict(history.get("rejected") or {}),
        "replies": applied + rejected,
        "applied": applied,
        "evaluations": len(evaluations),
        "staleness-mean": mean_staleness,
        "staleness-max": max_staleness,
    }


def node_updates(updates: Any) -> dict[str, int]:
    """Replies received per node, by ``stable-id`` (records without one are not counted)."""
    counts: dict[str, int] = {}
    for update in updates:
        if update.get("stable-id") is not None:
            key = str(update["stable-id"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def split_records(runs: Mapping[str, Mapping[int, History]], grid_size: int) -> Records:
    """The records of one split's runs (strategy -> seed -> history); a derived grid takes the
    G of the split's recorded grids (``grid_size`` when none has one)."""
    size = split_grid_size((h for by_seed in runs.values() for h in by_seed.values()), grid_size)
    return {
        strategy: {seed: make_record(history, size) for seed, history in by_seed.items()}
        for strategy, by_seed in runs.items()
    }


def record_grid(record: Record) -> Grid | None:
    """The run's comparison grid, as ``fl_async.bench.grid.run_grid`` gave it."""
    section = record.get("grid")
    if section is None:
        return None
    points = section["evaluations"]
    return Grid(
        size=int(section["size"]),
        budget=float(section["budget"]),
        times=tuple(float(p["virtual-time"]) for p in points),
        accuracies=tuple(float(p["accuracy"]) for p in points),
        walls=tuple(None if p["wall-time"] is None else float(p["wall-time"]) for p in points),
        source=section["source"],
    )


def ended_by_its_rule(fields: Mapping[str, Any]) -> bool:
    """Whether a run's ``summary`` fields say it ended by its own rule: a stop in
    ``ENDED_BY_ITS_RULE``, no fault recorded (its seed ends it the same way again)."""
    return fields.get("stopped-by") in ENDED_BY_ITS_RULE and not fields.get("faults")


def held_to_the_end(record: Record, grid: Grid | None) -> Grid | None:
    """The whole grid of a run that ended by its own rule before the budget's end (a stop in
    ``ENDED_BY_ITS_RULE``, no fault recorded: its seed ends it the same way again): no update came
    after its end, so its final model is in force at every later point, which takes its final
    accuracy. None for a complete grid and for any other unfinished run (cut off, or ended by a
    fault: run it again)."""
    fields, config = record["summary"], record["config"]
    final = fields.get("final-accuracy")
    if not ended_by_its_rule(fields) or final is None:
        return None
    if grid is None:  # it ended before the first point
        size, budget = int(config.get("eval-grid") or 0), float(config.get("max-virtual-time") or 0)
        grid = Grid(size, budget, (), (), (), RECORDED)
    missing = range(len(grid.times) + 1, grid.size + 1)
    if not missing or grid.budget <= 0:
        return None
    return replace(
        grid,
        times=grid.times + tuple(grid.budget * i / grid.size for i in missing),
        accuracies=grid.accuracies + (float(final),) * len(missing),
        walls=grid.walls + (None,) * len(missing),
    )


def comparison_grid(record: Record, *, hold_final: bool = True) -> Grid | None:
    """The run's grid (``record_grid``), completed by ``held_to_the_end`` when it ended by its
    own rule and ``hold_final``; a grid cut off stays incomplete."""
    grid = record_grid(record)
    return (held_to_the_end(record, grid) if hold_final else None) or grid


def record_note(record: Record, grid: Grid | None) -> str | None:
    """Why the run has no grid or an incomplete one (``grid_note`` on the record's fields)."""
    fields = record["summary"]
    seen = {"config": record["config"], **{k: fields[k] for k in ("stopped-by", "virtual-time")}}
    return grid_note(seen, grid)


def any_record(records: Records) -> Record:
    """One record of a split: its runs share the dataset, the nodes and the partition."""
    return next(iter(next(iter(records.values())).values()))


def dirichlet_alpha(config: Mapping[str, Any]) -> float | None:
    """The concentration of a Dirichlet split, or None for any other scheme."""
    alpha = config.get("partition.alpha")
    if config.get("partition.scheme") != "dirichlet" or alpha is None:
        return None
    return float(alpha)


def record_path(folder: Path, split: str, strategy: str, seed: int) -> Path:
    """Where a records folder keeps the record of one run."""
    return folder / split / f"{strategy}-seed{seed}.json"


def load_records(folder: Path) -> dict[str, Records]:
    """Every record under the records folder ``folder``: split -> strategy -> seed -> record."""
    found: dict[str, Records] = {}
    for path in sorted(folder.glob("*/*-seed*.json")):
        strategy, _, seed = path.stem.rpartition("-seed")
        if not is_run_name(strategy) or not seed.isdigit():
            continue
        record = read_json(path, "bench record", keys=("format",))
        if record.get("format") != RECORD_FORMAT:
            raise InvalidArgument(f"{path} is not a record of format {RECORD_FORMAT!r}")
        found.setdefault(path.parent.name, {}).setdefault(strategy, {})[int(seed)] = record
    return found


def dumps(value: Any) -> str:
    """``value`` as deterministic JSON: sorted keys, Python's shortest float repr, one line per
    item except for small flat containers (a grid point, a partition list), and a final newline."""
    return _dump(json.loads(json.dumps(value, allow_nan=False)), "") + "\n"


def _dump(value: Any, indent: str) -> str:
    if not isinstance(value, dict | list) or not value:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    items = list(value.values()) if isinstance(value, dict) else value
    flat = json.dumps(value, sort_keys=True, allow_nan=False)
    if len(indent) + len(flat) <= _LINE and not any(isinstance(v, dict | list) for v in items):
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        lines = [f"{inner}{json.dumps(k)}: {_dump(value[k], inner)}" for k in sorted(value)]
        return "{\n" + ",\n".join(lines) + f"\n{indent}}}"
    lines = [inner + _dump(v, inner) for v in value]
    return "[\n" + ",\n".join(lines) + f"\n{indent}]"
