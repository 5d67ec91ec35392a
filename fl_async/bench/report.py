"""A suite's results: per-run metrics, a Markdown table per split, plots and the raw JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fl_async.app.results import HISTORY
from fl_async.bench import metrics
from fl_async.bench.scenarios import BASELINE, STABILITY_BASELINE, STRATEGIES
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


def run_metrics(history: History, baseline: History | None = None) -> dict[str, Any]:
    """The metrics of one run; those relative to SSGD need ``baseline`` (same split and seed)."""
    times, accuracies = series(history)
    final_time = float(history.get("virtual-time") or (times[-1] if times else 0.0))
    mean_staleness, max_staleness = metrics.staleness_stats(history["updates"])
    applied, rejected = metrics.update_counts(history["updates"])
    found: dict[str, Any] = {
        "final-accuracy": accuracies[-1] if accuracies else None,
        "sigma-acc": metrics.sigma_acc(times, accuracies, final_time),
        "mean-abs-change": metrics.mean_abs_change(times, accuracies, final_time),
        "mean-staleness": mean_staleness,
        "max-staleness": max_staleness,
        "applied": applied,
        "rejected": rejected,
        "server-steps": history.get("server-steps"),
        "evaluations": len(accuracies),
        "virtual-time": final_time,
        "wall-time": history.get("wall-time"),
        "stopped-by": history.get("stopped-by"),
    }
    if baseline is not None:
        base_times, base_accuracies = series(baseline)
        target = base_accuracies[-1] if base_accuracies else None
        mine, base = _times_to(target, times, accuracies, base_times, base_accuracies)
        # SSGD's final accuracy is often its best: 90% of it shows the speed below the top.
        lower = None if target is None else LOWER_TARGET * target
        mine_lower, base_lower = _times_to(lower, times, accuracies, base_times, base_accuracies)
        found.update(
            {
                "target-accuracy": target,
                "time-to-target": mine,
                "baseline-time-to-target": base,
                "time-ratio": _ratio_of(mine, base),
                "time-ratio-90": _ratio_of(mine_lower, base_lower),
                "converged": metrics.converged(accuracies, base_accuracies),
            }
        )
    return found


def _times_to(
    target: float | None,
    times: Sequence[float],
    accuracies: Sequence[float],
    base_times: Sequence[float],
    base_accuracies: Sequence[float],
) -> tuple[float | None, float | None]:
    if target is None:
        return None, None
    return (
        metrics.time_to_accuracy(times, accuracies, target),
        metrics.time_to_accuracy(base_times, base_accuracies, target),
    )


def _ratio_of(mine: float | None, base: float | None) -> float | None:
    return None if mine is None or not base else mine / base


def split_metrics(runs: Runs) -> dict[str, dict[int, dict[str, Any]]]:
    """``run_metrics`` of every run of one split."""
    baselines = runs.get(BASELINE, {})
    return {
        strategy: {
            seed: run_metrics(history, baselines.get(seed)) for seed, history in by_seed.items()
        }
        for strategy, by_seed in runs.items()
    }


def summarize(per_run: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One row per strategy: the metrics aggregated over its seeds (order of ``STRATEGIES``)."""
    rows = []
    for strategy in sorted(per_run, key=_strategy_order):
        seeds = per_run[strategy]
        values = list(seeds.values())
        accuracies = _present(values, "final-accuracy")
        ratios = _present(values, "time-ratio")
        ratios_90 = _present(values, "time-ratio-90")
        with_baseline = [v for v in values if "converged" in v and v["converged"] is not None]
        rows.append(
            {
                "strategy": strategy,
                "seeds": sorted(seeds),
                "accuracy-mean": _mean(accuracies),
                "accuracy-sd": float(np.std(accuracies)) if accuracies else None,
                "sigma-acc": _mean(_present(values, "sigma-acc")),
                "mean-abs-change": _mean(_present(values, "mean-abs-change")),
                "time-ratio": _mean(ratios),
                "reached": len(ratios),
                "time-ratio-90": _mean(ratios_90),
                "reached-90": len(ratios_90),
                "with-baseline": len(with_baseline),
                "converged": sum(1 for v in with_baseline if v["converged"]),
                "mean-staleness": _mean(_present(values, "mean-staleness")),
                "max-staleness": max(_present(values, "max-staleness"), default=None),
                "applied": _mean(_present(values, "applied")),
                "rejected": _mean(_present(values, "rejected")),
                "virtual-time": _mean(_present(values, "virtual-time")),
                "wall-time": _mean(_present(values, "wall-time")),
            }
        )
    reference = per_run.get(STABILITY_BASELINE, {})
    for row in rows:
        # Paired over the seeds both have: a half-finished suite must not compare seed sets.
        common = [seed for seed in row["seeds"] if seed in reference]
        mine = _mean(_present([per_run[row["strategy"]][s] for s in common], "sigma-acc"))
        theirs = _mean(_present([reference[s] for s in common], "sigma-acc"))
        row["stability-gain"] = metrics.stability_gain(mine, theirs)
    return rows


COLUMNS: tuple[str, ...] = (
    "strategy",
    "seeds",
    "final acc. % (mean ± sd)",
    "σ_acc (pts)",
    "gain vs ASGD",
    "mean abs. change (pts)",
    "time to SSGD's final acc. (× SSGD)",
    "time to 90% of it (× SSGD)",
    "converged",
    "staleness mean / max",
    "updates applied / rejected",
    "virtual time",
    "wall s",
)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of ``summarize`` as a Markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        n = len(row["seeds"])
        cells = [
            row["strategy"],
            ",".join(str(s) for s in row["seeds"]),
            _pm(row["accuracy-mean"], row["accuracy-sd"]),
            _number(row["sigma-acc"], 100, 2),
            _gain(row["stability-gain"]),
            _number(row["mean-abs-change"], 100, 2),
            _ratio(row, n, "time-ratio", "reached"),
            _ratio(row, n, "time-ratio-90", "reached-90"),
            f"{row['converged']}/{row['with-baseline']}" if row["with-baseline"] else "–",
            f"{_number(row['mean-staleness'], 1, 2)} / {_number(row['max-staleness'], 1, 0)}",
            f"{_number(row['applied'], 1, 0)} / {_number(row['rejected'], 1, 0)}",
            _number(row["virtual-time"], 1, 0),
            _number(row["wall-time"], 1, 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_table(per_run: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> str:
    """Each run's final accuracy %, σ_acc and time to SSGD's final accuracy (× SSGD) as a
    Markdown table: one row per strategy, one column per seed (what the means are made of)."""
    seeds = sorted({seed for by_seed in per_run.values() for seed in by_seed})
    lines = [
        "| strategy | " + " | ".join(f"seed {seed}" for seed in seeds) + " |",
        "|" + "---|" * (len(seeds) + 1),
    ]
    for strategy in sorted(per_run, key=_strategy_order):
        cells = [strategy]
        for seed in seeds:
            found = per_run[strategy].get(seed)
            if found is None:
                cells.append("–")
                continue
            if "time-ratio" not in found:
                ratio = "–"
            elif found["time-ratio"] is None:
                ratio = "not reached"
            else:
                ratio = f"{found['time-ratio']:.2f}×"
            accuracy = _number(found["final-accuracy"], 100, 1)
            cells.append(f"{accuracy} / {_number(found['sigma-acc'], 100, 2)} / {ratio}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(out: Path, title: str = "") -> list[Path]:
    """Write ``report.md``, ``results.json`` and each split's plots into ``out``; their paths."""
    runs = load_runs(out)
    results: dict[str, Any] = {}
    sections = [f"# {title or 'fl-async bench'}\n"]
    paths = []
    for split, split_runs in runs.items():
        per_run = split_metrics(split_runs)
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
    (out / RESULTS).write_text(json.dumps(results, indent=1) + "\n")
    return [out / REPORT, out / RESULTS, *paths]


def plot_accuracy(runs: Runs, path: Path, title: str = "") -> None:
    """Test accuracy against virtual time: one colour per strategy, one line per seed."""
    figure = new_figure((7.5, 4.5))
    axes = figure.add_subplot()
    for index, strategy in enumerate(sorted(runs, key=_strategy_order)):
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
    strategies = sorted(runs, key=_strategy_order)
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
    split: str,
    runs: Runs,
    rows: Sequence[Mapping[str, Any]],
    per_run: Mapping[str, Mapping[int, Mapping[str, Any]]],
) -> str:
    any_history = next(iter(next(iter(runs.values())).values()))
    config = any_history.get("config", {})
    budgets = {seed: h["virtual-time"] for seed, h in sorted(runs.get(BASELINE, {}).items())}
    lines = [
        f"## {split}\n",
        f"{config.get('dataset')}, {any_history.get('num-nodes')} nodes, "
        f"{config.get('partition.scheme')} split, {config.get('clock.speed')} speeds "
        f"(sigma {config.get('clock.sigma')}), correlate={config.get('correlate')}.",
    ]
    if budgets:
        shown = ", ".join(f"seed {s}: {t:.0f}" for s, t in budgets.items())
        lines.append(f"Virtual-time budget (SSGD's final virtual time): {shown}.")
    lines += ["", markdown_table(rows), ""]
    if any(len(by_seed) > 1 for by_seed in per_run.values()):
        lines += [
            "Per seed: final acc. % / σ_acc (pts) / time to SSGD's final acc. (× SSGD).",
            "",
            per_seed_table(per_run),
            "",
        ]
    lines += [
        f"![accuracy]({split}/{ACCURACY_PLOT}) ![staleness]({split}/{STALENESS_PLOT})",
        "",
    ]
    return "\n".join(lines)


def _plot_title(split: str, runs: Runs) -> str:
    history = next(iter(next(iter(runs.values())).values()))
    return f"{history.get('config', {}).get('dataset')}, {history.get('num-nodes')} nodes, {split}"


def _strategy_order(name: str) -> int:
    return STRATEGIES.index(name) if name != BASELINE else -1


def _by_name(per_run: Mapping[str, Mapping[int, Any]]) -> dict[str, dict[str, Any]]:
    return {s: {str(seed): m for seed, m in seeds.items()} for s, seeds in per_run.items()}


def _present(values: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [v[key] for v in values if v.get(key) is not None]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _number(value: float | None, scale: float, digits: int) -> str:
    return "–" if value is None else f"{scale * value:.{digits}f}"


def _pm(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "–"
    return f"{100 * mean:.1f} ± {100 * (sd or 0.0):.1f}"


def _gain(gain: float | None) -> str:
    return "–" if gain is None else f"{100 * gain:+.0f}%"


def _ratio(row: Mapping[str, Any], n: int, key: str, count: str) -> str:
    if row["with-baseline"] == 0:
        return "–"
    if row[key] is None:
        return f"not reached (0/{n})"
    reached = "" if row[count] == n else f" ({row[count]}/{n} reached)"
    return f"{row[key]:.2f}{reached}"
