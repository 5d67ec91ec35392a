"""A suite's results: per-run metrics on the comparison grid, a Markdown table per split, plots
and the raw JSON (docs/bench.md, Metrics)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fl_async.app.results import HISTORY
from fl_async.bench import metrics, stats
from fl_async.bench.grid import DEFAULT_GRID, Grid, grid_note, run_grid, split_grid_size
from fl_async.bench.scenarios import BASELINE, STRATEGIES
from fl_async.bench.summary import PerRun, as_json, strategy_order, summarize
from fl_async.bench.table import markdown_table, notes, per_seed_table
from fl_async.plotting import accuracy_axes, new_figure, save_figure, staleness_histogram

REPORT = "report.md"
RESULTS = "results.json"
ACCURACY_PLOT = "accuracy.png"
STALENESS_PLOT = "staleness.png"
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
        if strategy not in STRATEGIES or not seed.isdigit():
            continue
        history = json.loads(path.read_text())
        found.setdefault(path.parent.parent.name, {}).setdefault(strategy, {})[int(seed)] = history
    return found


def series(history: History) -> tuple[list[float], list[float]]:
    """Virtual times and accuracies of the run's central evaluations."""
    points = [e for e in history["evaluations"] if e.get("accuracy") is not None]
    return [float(e["virtual-time"]) for e in points], [float(e["accuracy"]) for e in points]


def run_metrics(
    history: History, baseline: History | None = None, grid_size: int = DEFAULT_GRID
) -> dict[str, Any]:
    """The metrics of one run on its comparison grid (``grid_size`` points when derived); those
    relative to SSGD need ``baseline`` (same split and seed). A run with no grid gets a ``note``
    and no accuracy figure."""
    grid = run_grid(history, grid_size)
    mean_staleness, max_staleness = metrics.staleness_stats(history["updates"])
    applied, rejected = metrics.update_counts(history["updates"])
    found: dict[str, Any] = {
        "note": grid_note(history, grid),
        "mean-staleness": mean_staleness,
        "max-staleness": max_staleness,
        "applied": applied,
        "rejected": rejected,
        "server-steps": history.get("server-steps"),
        "evaluations": len(series(history)[0]),
        "virtual-time": history.get("virtual-time"),
        "wall-time": history.get("wall-time"),
        "stopped-by": history.get("stopped-by"),
    }
    if grid is None:
        return found
    found.update(grid_metrics(grid))
    base = None if baseline is None else run_grid(baseline, grid_size)
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
    size = split_grid_size((h for by_seed in runs.values() for h in by_seed.values()), grid_size)
    baselines = runs.get(BASELINE, {})
    return {
        strategy: {
            seed: run_metrics(history, baselines.get(seed), size)
            for seed, history in by_seed.items()
        }
        for strategy, by_seed in runs.items()
    }


def write_report(out: Path, title: str = "", grid_size: int = DEFAULT_GRID) -> list[Path]:
    """Write ``report.md``, ``results.json`` and each split's plots into ``out``; their paths.

    ``grid_size`` is G of a derived grid in a split where no run recorded one.
    """
    runs = load_runs(out)
    results: dict[str, Any] = {}
    sections = [f"# {title or 'fl-async bench'}\n"]
    paths = []
    for split, split_runs in runs.items():
        per_run = split_metrics(split_runs, grid_size)
        rows = summarize(per_run)
        results[split] = {"runs": _by_name(per_run), "summary": rows}
        accuracy_plot = out / split / ACCURACY_PLOT
        staleness_plot = out / split / STALENESS_PLOT
        plot_accuracy(split_runs, accuracy_plot, title=_plot_title(split, split_runs))
        plot_staleness(split_runs, staleness_plot, title=_plot_title(split, split_runs))
        paths += [accuracy_plot, staleness_plot]
        sections.append(_section(split, split_runs, rows, per_run))
    if not runs:
        sections.append("No finished run yet.\n")
    (out / REPORT).write_text("\n".join(sections))
    (out / RESULTS).write_text(json.dumps(results, indent=1, default=as_json) + "\n")
    return [out / REPORT, out / RESULTS, *paths]


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


def _section(split: str, runs: Runs, rows: Sequence[Mapping[str, Any]], per_run: PerRun) -> str:
    any_history = next(iter(next(iter(runs.values())).values()))
    config = any_history.get("config", {})
    lines = [
        f"## {split}\n",
        f"{config.get('dataset')}, {any_history.get('num-nodes')} nodes, "
        f"{config.get('partition.scheme')} split, {config.get('clock.speed')} speeds "
        f"(sigma {config.get('clock.sigma')}), correlate={config.get('correlate')}.",
        *_budget_lines(runs, per_run),
        "",
        markdown_table(rows),
        "",
        *notes(per_run),
    ]
    if any(len(by_seed) > 1 for by_seed in per_run.values()):
        lines += [
            "",
            "Per seed: final acc. % / σ_acc (pts) / time to SSGD's final acc. (× SSGD).",
            "",
            per_seed_table(per_run),
        ]
    lines += [
        "",
        f"![accuracy]({split}/{ACCURACY_PLOT}) ![staleness]({split}/{STALENESS_PLOT})",
        "",
    ]
    return "\n".join(lines)


def _budget_lines(runs: Runs, per_run: PerRun) -> list[str]:
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
    ssgd = runs.get(BASELINE, {}).values()
    sets = any(not h.get("config", {}).get("max-virtual-time") for h in ssgd)
    source = "SSGD's final virtual time" if sets else "--max-virtual-time"
    return [
        f"Virtual-time budget T ({source}): {shown}.",
        f"Every figure is read on a grid of {'/'.join(str(g) for g in sorted(sizes))} equally "
        "spaced virtual times T·i/G; σ_acc and mean abs. change over its points after T/2. "
        f"Intervals: {100 * stats.CONFIDENCE:.0f}% paired bootstrap over seeds "
        f"({stats.BOOTSTRAP_RESAMPLES:,} resamples, seed {stats.BOOTSTRAP_SEED}).",
    ]


def _plot_title(split: str, runs: Runs) -> str:
    history = next(iter(next(iter(runs.values())).values()))
    return f"{history.get('config', {}).get('dataset')}, {history.get('num-nodes')} nodes, {split}"


def _by_name(per_run: Mapping[str, Mapping[int, Any]]) -> dict[str, dict[str, Any]]:
    return {s: {str(seed): m for seed, m in seeds.items()} for s, seeds in per_run.items()}
