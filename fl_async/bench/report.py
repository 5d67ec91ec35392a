"""A suite's results: per-run metrics on the comparison grid, a Markdown table per split, plots
and the raw JSON (docs/bench.md, Metrics).

Every figure is computed from records (``fl_async.bench.records``): a suite folder's histories
are made into records first, so a records folder (``fl-async bench --export``) gives the same
tables without them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fl_async.app.results import HISTORY, read_history
from fl_async.bench import metrics, stats
from fl_async.bench.grid import DEFAULT_GRID, Grid
from fl_async.bench.records import (
    Record,
    Records,
    any_record,
    busiest_node_line,
    comparison_grid,
    dirichlet_alpha,
    held_to_the_end,
    load_records,
    machines_line,
    make_record,
    record_grid,
    record_note,
    setting,
    split_records,
)
from fl_async.bench.runner import with_provenance
from fl_async.bench.scenarios import BASELINE, is_run_name
from fl_async.bench.summary import PerRun, as_json, strategy_order, summarize
from fl_async.bench.table import markdown_table, notes, per_seed_table
from fl_async.config import PRESET_TABLES
from fl_async.plotting import accuracy_axes, new_figure, save_figure, staleness_histogram

REPORT = "report.md"
RESULTS = "results.json"
ACCURACY_PLOT = "accuracy.png"
STALENESS_PLOT = "staleness.png"
HELD = "ended by its own rule: its final accuracy holds at the later grid points"
"""Added to the note of a run whose grid ``held_to_the_end`` completes."""
LOWER_TARGET = 0.9
"""The second time-to-accuracy target, as a fraction of SSGD's final accuracy."""

History = Mapping[str, Any]
Runs = dict[str, dict[int, History]]
"""strategy -> seed -> history, for one split."""


def load_runs(out: Path) -> dict[str, Runs]:
    """Every finished run under the suite folder ``out``: split -> strategy -> seed -> history."""
    found: dict[str, Runs] = {}
    for path in sorted(out.glob(f"*/*-seed*/{HISTORY}")):
        strategy, _, seed = path.parent.name.rpartition("-seed")
        if not is_run_name(strategy) or not seed.isdigit():
            continue
        history = with_provenance(read_history(path), path.parent)
        found.setdefault(path.parent.parent.name, {}).setdefault(strategy, {})[int(seed)] = history
    return found


def series(history: History) -> tuple[list[float], list[float]]:
    """Virtual times and accuracies of the run's central evaluations."""
    points = [e for e in history["evaluations"] if e.get("accuracy") is not None]
    return [float(e["virtual-time"]) for e in points], [float(e["accuracy"]) for e in points]


def run_metrics(
    history: History, baseline: History | None = None, grid_size: int = DEFAULT_GRID
) -> dict[str, Any]:
    """``record_metrics`` of one run's history (``grid_size`` points when its grid is derived)
    and of its SSGD ``baseline`` (same split and seed)."""
    base = None if baseline is None else make_record(baseline, grid_size)
    return record_metrics(make_record(history, grid_size), base)


def record_metrics(
    record: Record, baseline: Record | None = None, *, hold_final: bool = True
) -> dict[str, Any]:
    """The metrics of one run on its comparison grid; those relative to SSGD need ``baseline``
    (same split and seed). A run with no grid, or with a grid it stopped before finishing (a
    wall-time limit, a failure), gets a ``note`` and no accuracy figure: its last point is not
    a final accuracy, and its seed drops out of the paired comparisons. A run that ended by its
    own rule keeps its final accuracy at the later points (``held_to_the_end``), unless
    ``hold_final`` is False (the tuning sweep's rule, fixed before: such a point takes no part)."""
    own = record_grid(record)
    held = held_to_the_end(record, own) if hold_final else None  # None for a complete grid
    grid = held or own
    summary = record["summary"]
    found: dict[str, Any] = {
        "note": record_note(record, own),
        "mean-staleness": summary["staleness-mean"],
        "max-staleness": summary["staleness-max"],
        "applied": summary["applied"],
        "rejected": summary["replies"] - summary["applied"],
        "server-steps": summary["server-steps"],
        "evaluations": summary["evaluations"],
        "virtual-time": summary["virtual-time"],
        "wall-time": summary["wall-time"],
        "stopped-by": summary["stopped-by"],
    }
    if grid is None or not grid.complete:
        return found
    if held is not None:
        found["note"] += f"; {HELD}"
    found.update(grid_metrics(grid))
    base = None if baseline is None else comparison_grid(baseline, hold_final=hold_final)
    if base is not None:
        found.update(relative_metrics(grid, base))
    return found


def grid_metrics(grid: Grid) -> dict[str, Any]:
    """Final accuracy (the last grid point), σ_acc and mean abs. change (points i > G / 2)."""
    return {
        "final-accuracy": grid.accuracies[-1],
        "sigma-acc": metrics.sigma_acc(grid.times, grid.accuracies, grid.budget),
        "mean-abs-change": metrics.mean_abs_change(grid.times, grid.accuracies, grid.budget),
        "grid-source": grid.source,
        "grid-size": grid.size,
        "grid-budget": grid.budget,
        "grid-accuracies": list(grid.accuracies),
    }


def relative_metrics(grid: Grid, base: Grid) -> dict[str, Any]:
    """The figures against SSGD's grid ``base`` (same split and seed): the target is SSGD's
    final grid accuracy; times are those of the first grid point reaching it."""
    target = base.accuracies[-1]
    mine, theirs = _reach(grid, target), _reach(base, target)
    # SSGD's final accuracy is often its best: 90% of it shows the speed below the top.
    mine_90, theirs_90 = _reach(grid, LOWER_TARGET * target), _reach(base, LOWER_TARGET * target)
    return {
        "target-accuracy": target,
        "accuracy-difference": grid.accuracies[-1] - target,
        "time-to-target": mine[0],
        "wall-to-target": mine[1],
        "baseline-time-to-target": theirs[0],
        "baseline-wall-to-target": theirs[1],
        "time-ratio": _ratio_of(mine[0], theirs[0]),
        "wall-ratio": _ratio_of(mine[1], theirs[1]),
        "time-ratio-90": _ratio_of(mine_90[0], theirs_90[0]),
        "converged": metrics.converged(grid.accuracies, base.accuracies),
    }


def _reach(grid: Grid, target: float) -> tuple[float | None, float | None]:
    """Virtual and wall time of the first grid point whose accuracy reaches ``target``."""
    return (
        metrics.time_to_accuracy(grid.times, grid.accuracies, target),
        metrics.time_to_accuracy(grid.walls, grid.accuracies, target),
    )


def _ratio_of(mine: float | None, base: float | None) -> float | None:
    return None if mine is None or not base else mine / base


def split_metrics(runs: Runs, grid_size: int = DEFAULT_GRID) -> dict[str, dict[int, dict]]:
    """``run_metrics`` of every run of one split; a derived grid takes the G of the split's
    recorded grids (``grid_size`` when none has one)."""
    return records_metrics(split_records(runs, grid_size))


def records_metrics(records: Records) -> dict[str, dict[int, dict]]:
    """``record_metrics`` of every run of one split, each against its seed's SSGD record."""
    baselines = records.get(BASELINE, {})
    return {
        strategy: {
            seed: record_metrics(record, baselines.get(seed)) for seed, record in by_seed.items()
        }
        for strategy, by_seed in records.items()
    }


def write_report(out: Path, title: str = "", grid_size: int = DEFAULT_GRID) -> list[Path]:
    """Write ``report.md``, ``results.json`` and each split's plots into the suite folder
    ``out``; their paths.

    ``grid_size`` is G of a derived grid in a split where no run recorded one.
    """
    runs = load_runs(out)
    records = {split: split_records(split_runs, grid_size) for split, split_runs in runs.items()}
    paths = write_tables(out, records, title, plots=True)
    for split, split_runs in runs.items():
        accuracy_plot = out / split / ACCURACY_PLOT
        staleness_plot = out / split / STALENESS_PLOT
        plot_accuracy(split_runs, accuracy_plot, title=_plot_title(split, records[split]))
        plot_staleness(split_runs, staleness_plot, title=_plot_title(split, records[split]))
        paths += [accuracy_plot, staleness_plot]
    return paths


def write_records_report(folder: Path, title: str = "") -> list[Path]:
    """Write ``report.md`` and ``results.json`` of the records folder ``folder`` into it (no
    plots: they need the histories); their paths."""
    return write_tables(folder, load_records(folder), title, plots=False)


def write_tables(
    out: Path, records: Mapping[str, Records], title: str = "", plots: bool = False
) -> list[Path]:
    """Write ``report.md`` and ``results.json`` of ``records`` (split -> strategy -> seed ->
    record) into ``out``; ``plots``: link each split's plots. Their paths."""
    results: dict[str, Any] = {}
    sections = [f"# {title or 'fl-async bench'}\n"]
    for split, by_strategy in sorted_records(records).items():
        per_run = records_metrics(by_strategy)
        rows = summarize(per_run)
        results[split] = {"runs": _by_name(per_run), "summary": rows}
        sections.append(_section(split, by_strategy, rows, per_run, plots))
    if not records:
        sections.append("No finished run yet.\n")
    (out / REPORT).write_text("\n".join(sections))
    (out / RESULTS).write_text(json.dumps(results, indent=1, default=as_json) + "\n")
    return [out / REPORT, out / RESULTS]


def sorted_records(records: Mapping[str, Records]) -> dict[str, Records]:
    """``records`` in the report's order: splits by name, SSGD first, seeds ascending."""
    return {
        split: {
            strategy: dict(sorted(records[split][strategy].items()))
            for strategy in sorted(records[split], key=strategy_order)
        }
        for split in sorted(records)
    }


def split_tables(split: str, records: Records) -> str:
    """The Markdown of one split's figures, as a generated block of RESULTS.md holds them: the
    split in bold, then what the report's section shows but its heading and plots."""
    per_run = records_metrics(records)
    body = _body(records, summarize(per_run), per_run)
    return "\n".join([f"**{split}**: {body[0]}", *body[1:]])


def plot_accuracy(runs: Runs, path: Path, title: str = "") -> None:
    """Test accuracy against virtual time: one colour per strategy, one line per seed."""
    figure = new_figure((7.5, 4.5))
    axes = figure.add_subplot()
    for index, strategy in enumerate(sorted(runs, key=strategy_order)):
        colour = f"C{index % 10}"
        for n, seed in enumerate(sorted(runs[strategy])):
            times, accuracies = series(runs[strategy][seed])
            axes.plot(
                times,
                accuracies,
                color=colour,
                linewidth=1.8 if strategy == BASELINE else 1.2,
                linestyle="--" if strategy == BASELINE else "-",
                alpha=0.85,
                label=strategy.upper() if n == 0 else None,
            )
    accuracy_axes(axes, "virtual time (s)")
    axes.legend(loc="lower right", fontsize="small", ncol=2)
    axes.set_title(f"{title}: accuracy (one line per seed)" if title else "accuracy")
    save_figure(figure, path)


def plot_staleness(runs: Runs, path: Path, title: str = "") -> None:
    """One staleness histogram per strategy, over the replies of all its seeds."""
    strategies = sorted(runs, key=strategy_order)
    columns = min(3, max(1, len(strategies)))
    rows = -(-len(strategies) // columns) or 1
    figure = new_figure((3.2 * columns, 2.4 * rows + 0.4))
    grid = figure.subplots(rows, columns, squeeze=False)
    for axes, strategy in zip(grid.flat, strategies, strict=False):
        staleness = [u["staleness"] for h in runs[strategy].values() for u in h["updates"]]
        summary = staleness_histogram(axes, staleness, fontsize="small")
        axes.set_title(f"{strategy.upper()}: {summary}", fontsize="small")
    for axes in list(grid.flat)[len(strategies) :]:
        axes.set_visible(False)
    if title:
        figure.suptitle(f"{title}: staleness")
    save_figure(figure, path)


def _section(
    split: str, records: Records, rows: Sequence[Mapping[str, Any]], per_run: PerRun, plots: bool
) -> str:
    lines = [f"## {split}\n", *_body(records, rows, per_run), ""]
    if plots:
        images = f"![accuracy]({split}/{ACCURACY_PLOT}) ![staleness]({split}/{STALENESS_PLOT})"
        lines += [images, ""]
    return "\n".join(lines)


def _split_name(config: Mapping[str, Any]) -> str:
    """The scheme, with its concentration for a Dirichlet split (the runs of one split share it)."""
    alpha = dirichlet_alpha(config)
    return str(config.get("partition.scheme")) if alpha is None else f"dirichlet(alpha={alpha:g})"


def _body(records: Records, rows: Sequence[Mapping[str, Any]], per_run: PerRun) -> list[str]:
    """The split's settings, budgets, table, notes and per-seed table (several seeds)."""
    record = any_record(records)
    config = record["config"]
    lines = [
        f"{config.get('dataset')}, {record['run'].get('num-nodes')} nodes, "
        f"{_split_name(config)} split, {config.get('clock.speed')} speeds "
        f"(sigma {config.get('clock.sigma')}), correlate={config.get('correlate')}.",
        *_budget_lines(records, per_run),
        *_variant_lines(records),
        *machines_line(records),
        *busiest_node_line(records),
        "",
        markdown_table(rows),
    ]
    found_notes = notes(per_run)
    lines += ["", *found_notes] if found_notes else []
    if any(len(by_seed) > 1 for by_seed in per_run.values()):
        lines += [
            "",
            "Per seed: final acc. % / σ_acc (pts) / time to SSGD's final acc. (× SSGD).",
            "",
            per_seed_table(per_run),
        ]
    return lines


def _budget_lines(records: Records, per_run: PerRun) -> list[str]:
    """The budget T of each seed and how the figures were computed (grid, intervals)."""
    budgets: dict[int, float] = {}
    sizes = set()
    for by_seed in per_run.values():
        for seed, found in by_seed.items():
            if found.get("grid-budget") is not None:
                budgets.setdefault(seed, found["grid-budget"])
                sizes.add(found["grid-size"])
    if not budgets:
        return []
    shown = ", ".join(f"seed {s}: {t:.0f}" for s, t in sorted(budgets.items()))
    ssgd = records.get(BASELINE, {}).values()
    sets = any(not r["config"].get("max-virtual-time") for r in ssgd)
    source = "SSGD's final virtual time" if sets else "--max-virtual-time"
    return [
        f"Virtual-time budget T ({source}): {shown}.",
        f"Every figure is read on a grid of {'/'.join(str(g) for g in sorted(sizes))} equally "
        "spaced virtual times T·i/G; σ_acc and mean abs. change over its points after T/2. "
        f"Intervals: {100 * stats.CONFIDENCE:.0f}% paired bootstrap over seeds "
        f"({stats.BOOTSTRAP_RESAMPLES:,} resamples, seed {stats.BOOTSTRAP_SEED}).",
    ]


_PER_RUN_KEYS = {"strategy", "num-rounds", "max-virtual-time", "eval-every", "eval-grid"}
"""Run-config keys that differ between the runs of a seed by design, not by a variant."""


def _variant_lines(records: Records) -> list[str]:
    """One line naming each variant's preset and the keys it sets: those of its preset's table
    that differ from the preset's own run in the records (from its defaults when there is none:
    a suite may give the preset settings of its own, e.g. a sweep's point) and the shared ones
    that differ from SSGD's run."""
    described = []
    for name in sorted(records, key=strategy_order):
        record = next(iter(records[name].values()))
        config = record["config"]
        preset = config.get("strategy")
        if name == preset or preset not in PRESET_TABLES:
            continue
        defaults = {f"{preset}.{key}": value for key, value in PRESET_TABLES[preset].items()}
        own = next(iter(records.get(preset, {}).values()), {}).get("config", {})
        defaults = {key: own.get(key, value) for key, value in defaults.items()}
        baseline = next(iter(records.get(BASELINE, {}).values()), {}).get("config", {})
        changed = {
            key: value
            for key, value in sorted(config.items())
            if (key in defaults and value != defaults[key])
            or (
                key not in defaults
                and key not in _PER_RUN_KEYS
                and baseline
                and value != setting(baseline, key)
            )
        }
        shown = " ".join(f"{key}={value!r}" for key, value in changed.items()) or "no changes"
        described.append(f"`{name}` = {preset} with {shown}")
    return [f"Variants: {'; '.join(described)}."] if described else []


def _plot_title(split: str, records: Records) -> str:
    record = any_record(records)
    return f"{record['config'].get('dataset')}, {record['run'].get('num-nodes')} nodes, {split}"


def _by_name(per_run: Mapping[str, Mapping[int, Any]]) -> dict[str, dict[str, Any]]:
    return {s: {str(seed): m for seed, m in seeds.items()} for s, seeds in per_run.items()}
