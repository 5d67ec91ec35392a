"""A sweep's choice: the best point of each strategy's grid, by a rule declared in advance, and
the tuned record that ``fl-async bench --tuned`` runs again by name.

**The rule.** A point's score is the mean, over every run of it (each split and seed of the
sweep), of its final grid accuracy (``a_G``) and of its ``σ_acc`` (fl_async.bench.report). Only
points with a final grid accuracy on every split and seed any point of the strategy ran take
part. The points whose mean final accuracy is within the grid file's ``tie-margin`` accuracy
points of the highest are tied, and the tied point with the lowest mean ``σ_acc`` (the
steadier) is chosen; then the first in the grid file's order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fl_async.bench.records import Records, dumps
from fl_async.bench.report import record_metrics
from fl_async.bench.sweep import SweepGrid, Value, point_name
from fl_async.config import PRESET_TABLES
from fl_async.files import write_atomically
from fl_async.validation import InvalidArgument

TUNED_FORMAT = "fl-async-bench-tuned/1"
"""The ``format`` of a tuned record; ``--tuned`` refuses any other."""
TUNED_FILE = "tuned.json"
"""Where a sweep writes its tuned record, in its suite (or records) folder."""
RULE = (
    "highest mean final grid accuracy over every split and seed of the sweep (points lacking a "
    "final grid accuracy on one of them take no part); points within tie-margin accuracy points "
    "of the highest are tied, and the one with the lowest mean sigma_acc wins, then the first "
    "in the grid file"
)
"""The selection rule, as the tuned record states it."""


@dataclass(frozen=True)
class PointScore:
    """One point of a strategy's grid and how its runs ended."""

    name: str
    overrides: dict[str, Value]
    finals: tuple[float, ...]
    sigmas: tuple[float, ...]
    missing: tuple[str, ...]
    """The runs that give no figure (``dirichlet seed 2: no run``): the point takes no part."""

    def mean_final(self) -> float | None:
        """Mean final grid accuracy over its runs (a fraction)."""
        return sum(self.finals) / len(self.finals) if self.finals else None

    def mean_sigma(self) -> float | None:
        """Mean ``σ_acc`` over its runs (a fraction)."""
        return sum(self.sigmas) / len(self.sigmas) if self.sigmas else None

    def as_json(self) -> dict[str, Any]:
        """The point as the tuned record lists it."""
        return {
            "name": self.name,
            "run-config": dict(self.overrides),
            "runs": len(self.finals),
            "final-accuracy": self.mean_final(),
            "sigma-acc": self.mean_sigma(),
            "eligible": not self.missing and bool(self.finals),
            "missing": list(self.missing),
        }


def score_points(
    grid: SweepGrid, strategy: str, records: Mapping[str, Records]
) -> list[PointScore]:
    """Every point of ``strategy``'s grid scored on ``records`` (split -> run name -> seed ->
    record), over the splits and seeds any of its points has a record for."""
    names = [(point_name(strategy, o), o) for o in grid.points(strategy)]
    pairs = sorted(
        {
            (split, seed)
            for split, by_name in records.items()
            for name, _ in names
            for seed in by_name.get(name, {})
        }
    )
    scores = []
    for name, overrides in names:
        finals, sigmas, missing = [], [], []
        for split, seed in pairs:
            record = records.get(split, {}).get(name, {}).get(seed)
            found = {} if record is None else record_metrics(record, hold_final=False)
            if found.get("final-accuracy") is None or found.get("sigma-acc") is None:
                why = "no run" if record is None else found.get("note") or "no final accuracy"
                missing.append(f"{split} seed {seed}: {why}")
                continue
            finals.append(float(found["final-accuracy"]))
            sigmas.append(float(found["sigma-acc"]))
        scores.append(PointScore(name, overrides, tuple(finals), tuple(sigmas), tuple(missing)))
    return scores


def choose(scores: list[PointScore], tie_margin: float) -> PointScore | None:
    """The point the rule picks (module docstring); None when no point ran on every split and
    seed. ``tie_margin`` is in accuracy points."""
    eligible = [p for p in scores if not p.missing and p.finals]
    if not eligible:
        return None
    best = max(p.mean_final() for p in eligible)
    tied = [p for p in eligible if p.mean_final() >= best - tie_margin / 100]
    return min(tied, key=lambda p: p.mean_sigma())  # min keeps the first of equals


def tuned_record(
    grid: SweepGrid,
    strategies: tuple[str, ...],
    records: Mapping[str, Records],
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """The tuned record of a sweep: the rule, the grid, the suite's settings, every point's
    scores and the chosen point per strategy (absent when none could be chosen)."""
    points, chosen = {}, {}
    for strategy in strategies:
        scores = score_points(grid, strategy, records)
        points[strategy] = [score.as_json() for score in scores]
        pick = choose(scores, grid.tie_margin)
        if pick is not None:
            chosen[strategy] = {
                key: pick.as_json()[key]
                for key in ("name", "run-config", "runs", "final-accuracy", "sigma-acc")
            }
    return {
        "format": TUNED_FORMAT,
        "rule": RULE,
        "tie-margin": grid.tie_margin,
        "grid-file": str(grid.path),
        "description": grid.description,
        "grid": grid.as_json(),
        "settings": dict(settings),
        "points": points,
        "chosen": chosen,
    }


def write_tuned(path: Path, record: Mapping[str, Any]) -> Path:
    """Write the tuned record deterministically (sorted keys, exact floats)."""
    return write_atomically(path, dumps(record))


def load_tuned(path: Path) -> dict[str, dict[str, Value]]:
    """The chosen settings of a tuned record: strategy -> run-config overrides; InvalidArgument
    when it is not one, or names a preset or key this fl-async does not have."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InvalidArgument(f"--tuned {path}: cannot read it: {error}") from error
    if not isinstance(record, dict) or record.get("format") != TUNED_FORMAT:
        raise InvalidArgument(f"--tuned {path} is not a tuned record ({TUNED_FORMAT!r})")
    found: dict[str, dict[str, Value]] = {}
    for strategy, pick in record.get("chosen", {}).items():
        table = PRESET_TABLES.get(strategy)
        settings = dict(pick.get("run-config") or {})
        bad = [k for k in settings if table is None or k.partition(".")[2] not in table]
        if table is None or bad or any(not k.startswith(f"{strategy}.") for k in settings):
            raise InvalidArgument(
                f"--tuned {path}: {strategy} {sorted(settings)} is not a setting of a preset "
                "this fl-async has"
            )
        found[strategy] = settings
    return found
