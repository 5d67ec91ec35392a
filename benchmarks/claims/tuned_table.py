"""The generated table of a sweep: each strategy's default point beside the point the sweep chose.

A block ``<!-- generated tuned from <records folder> -->`` in a Markdown file is made from the
``tuned.json`` that ``fl-async bench --sweep GRID --out <records folder> --report-only`` wrote
there (fl_async.bench.tuning): one row per strategy with the mean final grid accuracy and mean
``σ_acc`` of its default point (the preset's defaults, "auto" rates included) and of the chosen
one, and whether the sweep says the default should change (it chose another point).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fl_async.bench.tuning import TUNED_FILE, TUNED_FORMAT
from fl_async.files import read_json
from fl_async.validation import InvalidArgument

HEADER = (
    "| strategy | default: final acc. | default: σ_acc | chosen point | chosen: final acc. "
    "| chosen: σ_acc | runs per point | change the default? |"
)


def read_tuned(folder: Path) -> dict[str, Any]:
    """The tuned record in ``folder``; InvalidArgument naming the file when it is not one."""
    path = folder / TUNED_FILE
    fix = "make it again with fl-async bench --sweep GRID --report-only"
    record = read_json(path, "tuned record", keys=("format", "points", "chosen", "rule"), fix=fix)
    if record["format"] != TUNED_FORMAT:
        raise InvalidArgument(f"{path} is not a tuned record ({TUNED_FORMAT!r})")
    return record


def tuned_lines(record: dict[str, Any]) -> list[str]:
    """The table of ``record`` (a tuned record), a row per strategy of its grid."""
    rows = [HEADER, "|---|---|---|---|---|---|---|---|"]
    for strategy, points in record["points"].items():
        default = next((p for p in points if p["name"] == strategy), None)
        chosen = record["chosen"].get(strategy)
        rows.append(
            "| "
            + " | ".join(
                [
                    strategy,
                    _percent(default, "final-accuracy"),
                    _percent(default, "sigma-acc"),
                    "none (no point ran on every split and seed)"
                    if chosen is None
                    else f"{chosen['name']} ({_settings(chosen['run-config'])})",
                    _percent(chosen, "final-accuracy"),
                    _percent(chosen, "sigma-acc"),
                    str(max((p["runs"] for p in points), default=0)),
                    _verdict(strategy, default, chosen),
                ]
            )
            + " |"
        )
    margin = record.get("tie-margin", 0)
    rule = f"Rule: {record['rule']} (tie-margin {margin} accuracy points)."
    return [*rows, "", rule]


def _percent(point: dict[str, Any] | None, key: str) -> str:
    value = None if point is None else point.get(key)
    return "–" if value is None else f"{100 * float(value):.1f}%"


def _settings(run_config: dict[str, Any]) -> str:
    return ", ".join(f"{key} = {value}" for key, value in run_config.items()) or "defaults"


def _verdict(strategy: str, default: dict[str, Any] | None, chosen: dict[str, Any] | None) -> str:
    if chosen is None:
        return "no choice"
    if default is None:
        return f"not in the grid: {chosen['name']}"
    return "no" if chosen["name"] == strategy else "yes"
