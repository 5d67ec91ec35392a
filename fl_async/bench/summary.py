"""One row per strategy: a split's per-run metrics over seeds, and the paired comparisons.

Every comparison pairs seeds (the same seed of two strategies shares partitions, initial weights
and node speeds) and comes with its bootstrap interval (``fl_async.bench.stats``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_async.bench import stats
from fl_async.bench.scenarios import BASELINE, STABILITY_BASELINE, STRATEGIES, preset_of

PerRun = Mapping[str, Mapping[int, Mapping[str, Any]]]
"""strategy -> seed -> ``run_metrics``, for one split."""


def summarize(per_run: PerRun) -> list[dict[str, Any]]:
    """One row per strategy (order of ``STRATEGIES``, SSGD first): means over its seeds, and
    the paired estimates vs SSGD and ASGD (``stats.Estimate``)."""
    rows = [_row(strategy, per_run[strategy]) for strategy in sorted(per_run, key=strategy_order)]
    reference = per_run.get(STABILITY_BASELINE, {})
    for row in rows:
        row["stability-gain"] = stability_gain(per_run[row["strategy"]], reference)
    return rows


def _row(strategy: str, seeds: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The row of one strategy, from the runs that have a grid (the others are noted apart)."""
    values = list(seeds.values())
    accuracies = _present(values, "final-accuracy")
    ratios = _present(values, "time-ratio")
    with_baseline = [v for v in values if v.get("converged") is not None]
    return {
        "strategy": strategy,
        "seeds": sorted(seeds),
        "grid-seeds": sorted(s for s, v in seeds.items() if v.get("final-accuracy") is not None),
        "accuracy-mean": _mean(accuracies),
        "accuracy-sd": float(np.std(accuracies)) if accuracies else None,
        # per seed: final accuracy minus SSGD's, same seed (the pairing is in the run metrics)
        "accuracy-difference": stats.paired(stats.mean, _present(values, "accuracy-difference")),
        "sigma-acc": _mean(_present(values, "sigma-acc")),
        "mean-abs-change": _mean(_present(values, "mean-abs-change")),
        "time-ratio": stats.paired(stats.mean, ratios),
        "reached": len(ratios),
        "time-ratio-90": _mean(_present(values, "time-ratio-90")),
        "reached-90": len(_present(values, "time-ratio-90")),
        "wall-ratio": _mean(_present(values, "wall-ratio")),
        "reached-wall": len(_present(values, "wall-ratio")),
        "with-baseline": len(with_baseline),
        "converged": sum(1 for v in with_baseline if v["converged"]),
        "mean-staleness": _mean(_present(values, "mean-staleness")),
        "max-staleness": max(_present(values, "max-staleness"), default=None),
        "applied": _mean(_present(values, "applied")),
        "rejected": _mean(_present(values, "rejected")),
        "virtual-time": _mean(_present(values, "virtual-time")),
        "wall-time": _mean(_present(values, "wall-time")),
    }


def common_seeds(
    mine: Mapping[int, Mapping[str, Any]], theirs: Mapping[int, Mapping[str, Any]], key: str
) -> list[int]:
    """The seeds (ascending) for which both runs have the figure ``key``: the pairs."""
    return [
        seed
        for seed in sorted(mine)
        if mine[seed].get(key) is not None and theirs.get(seed, {}).get(key) is not None
    ]


def stability_gain(
    mine: Mapping[int, Mapping[str, Any]], reference: Mapping[int, Mapping[str, Any]]
) -> stats.Estimate:
    """``(σ_B − σ_A) / σ_B`` over the seeds both have a σ_acc for, each σ averaged over them."""
    # Paired: a half-finished suite must not compare one seed set with another.
    common = common_seeds(mine, reference, "sigma-acc")
    return stats.paired(
        stats.relative_reduction,
        [mine[seed]["sigma-acc"] for seed in common],
        [reference[seed]["sigma-acc"] for seed in common],
    )


def strategy_order(name: str) -> tuple[int, int, str]:
    """Sort key: SSGD first, then the order of ``STRATEGIES``; a variant (``gsgm-m0``) after its
    preset, variants of one preset by name, names of no preset last."""
    if name == BASELINE:
        return (-1, 0, "")
    preset = preset_of(name)
    index = STRATEGIES.index(preset) if preset in STRATEGIES else len(STRATEGIES)
    return (index, int(name != preset), name)


def as_json(value: Any) -> Any:
    """``json.dumps``'s ``default`` for the rows: an Estimate as its fields."""
    if isinstance(value, stats.Estimate):
        return value.as_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _present(values: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [v[key] for v in values if v.get(key) is not None]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None
