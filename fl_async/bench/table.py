"""The report's Markdown: the table of ``summarize``'s rows, the per-seed table and the notes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fl_async.bench import stats
from fl_async.bench.scenarios import BASELINE, STABILITY_BASELINE
from fl_async.bench.summary import PerRun, strategy_order

COLUMNS: tuple[str, ...] = (
    "strategy",
    "seeds",
    "final acc. % (mean ± sd)",
    "final acc. − SSGD's (pts) [95% CI]",
    "σ_acc (pts)",
    "gain vs ASGD [95% CI]",
    "mean abs. change (pts)",
    "time to SSGD's final acc. (× SSGD) [95% CI]",
    "time to 90% of it (× SSGD)",
    "wall time to SSGD's final acc. (× SSGD)",
    "converged",
    "staleness mean / max",
    "updates applied / rejected",
    "virtual time",
    "wall s",
)
NOT_DISTINGUISHABLE = "not distinguishable"
REFERENCE = "reference"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of ``summarize`` as a Markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cells(row)) + " |")
    return "\n".join(lines)


def _cells(row: Mapping[str, Any]) -> list[str]:
    """One table row; a strategy whose runs have no grid says so instead of an accuracy."""
    n = len(row["grid-seeds"])
    baseline = row["strategy"] == BASELINE
    accuracy = _pm(row["accuracy-mean"], row["accuracy-sd"]) if n else "no grid: re-run"
    return [
        row["strategy"],
        ",".join(str(s) for s in row["seeds"]),
        accuracy,
        REFERENCE if baseline else estimate_text(row["accuracy-difference"], scale=100, digits=1),
        _number(row["sigma-acc"], 100, 2),
        _gain(row),
        _number(row["mean-abs-change"], 100, 2),
        REFERENCE if baseline else _time_ratio(row, n),
        REFERENCE if baseline else _ratio(row, n, "time-ratio-90", "reached-90"),
        REFERENCE if baseline else _ratio(row, n, "wall-ratio", "reached-wall"),
        f"{row['converged']}/{row['with-baseline']}" if row["with-baseline"] else "–",
        f"{_number(row['mean-staleness'], 1, 2)} / {_number(row['max-staleness'], 1, 0)}",
        f"{_number(row['applied'], 1, 0)} / {_number(row['rejected'], 1, 0)}",
        _number(row["virtual-time"], 1, 0),
        _number(row["wall-time"], 1, 0),
    ]


def per_seed_table(per_run: PerRun) -> str:
    """Each run's final accuracy %, σ_acc and time to SSGD's final accuracy (× SSGD) on the
    grid, as a Markdown table: one row per strategy, one column per seed."""
    seeds = sorted({seed for by_seed in per_run.values() for seed in by_seed})
    lines = [
        "| strategy | " + " | ".join(f"seed {seed}" for seed in seeds) + " |",
        "|" + "---|" * (len(seeds) + 1),
    ]
    for strategy in sorted(per_run, key=strategy_order):
        cells = [strategy] + [_seed_cell(per_run[strategy].get(seed)) for seed in seeds]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _seed_cell(found: Mapping[str, Any] | None) -> str:
    if found is None:
        return "–"
    if found.get("final-accuracy") is None:
        return found.get("note") or "–"
    if "time-ratio" not in found:
        ratio = "–"
    elif found["time-ratio"] is None:
        ratio = "not reached"
    else:
        ratio = f"{found['time-ratio']:.2f}×"
    accuracy = _number(found["final-accuracy"], 100, 1)
    return f"{accuracy} / {_number(found['sigma-acc'], 100, 2)} / {ratio}"


def notes(per_run: PerRun) -> list[str]:
    """One Markdown list item per run with no grid or an incomplete one."""
    return [
        f"- {strategy} seed {seed}: {found['note']}"
        for strategy in sorted(per_run, key=strategy_order)
        for seed, found in sorted(per_run[strategy].items())
        if found.get("note")
    ]


def estimate_text(
    estimate: stats.Estimate, *, scale: float, digits: int, unit: str = "", null: float = 0.0
) -> str:
    """``value [low, high]``, with "not distinguishable" when the interval holds ``null``; a
    difference (``null`` 0) is shown signed, a ratio (``null`` 1) is not."""
    if estimate.value is None:
        return "–"
    sign = "+" if null == 0.0 else ""
    value = f"{scale * estimate.value:{sign}.{digits}f}{unit}"
    if estimate.seeds == 1:
        return f"{value} [n/a (1 seed)]"
    if estimate.low is None or estimate.high is None:
        return f"{value} [n/a]"
    low = f"{scale * estimate.low:{sign}.{digits}f}{unit}"
    high = f"{scale * estimate.high:{sign}.{digits}f}{unit}"
    shown = f"{value} [{low}, {high}]"
    return shown if estimate.distinguishable(null) else f"{shown} {NOT_DISTINGUISHABLE}"


def _gain(row: Mapping[str, Any]) -> str:
    if row["strategy"] == STABILITY_BASELINE:
        return REFERENCE
    return estimate_text(row["stability-gain"], scale=100, digits=0, unit="%")


def _time_ratio(row: Mapping[str, Any], n: int) -> str:
    """The mean ratio over the seeds that reached the target; 1 is "as fast as SSGD"."""
    if row["with-baseline"] == 0:
        return "–"
    if row["reached"] == 0:
        return f"not reached (0/{n})"
    reached = "" if row["reached"] == n else f" ({row['reached']}/{n} reached)"
    return estimate_text(row["time-ratio"], scale=1, digits=2, null=1.0) + reached


def _ratio(row: Mapping[str, Any], n: int, key: str, count: str) -> str:
    if row["with-baseline"] == 0:
        return "–"
    if row[key] is None:
        return f"not reached (0/{n})"
    reached = "" if row[count] == n else f" ({row[count]}/{n} reached)"
    return f"{row[key]:.2f}{reached}"


def _number(value: float | None, scale: float, digits: int) -> str:
    return "–" if value is None else f"{scale * value:.{digits}f}"


def _pm(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "–"
    return f"{100 * mean:.1f} ± {100 * (sd or 0.0):.1f}"
