"""The GSGM paper's claims, judged on records: the decision rule of the GSGM study, as tables.

Every comparison pairs seeds and carries its 95% bootstrap interval (``fl_async.bench.stats``).
The rule (docs/bench.md, "The verdict"), fixed before the evaluation seeds were run:

- **Claim 1** (steadier than an asynchronous baseline, with slightly higher accuracy) holds for
  a GSGM run against a baseline on one split when its σ_acc gain over the baseline is at least
  ``STABILITY_CLAIM`` with an interval above 0, and its final accuracy minus the baseline's is
  at least 0 with an interval whose lower end is at least ``ACCURACY_MARGIN``.
- **Claim 2** (only GSGM converges at 30 nodes) holds for a GSGM run when it converged on every
  seed (two or more) and each asynchronous baseline on at most ``ONLY_CONVERGES`` of its seeds
  (each judged on two or more); shown for splits of 30 nodes or more.
- **Claim 3** (robust to the degree of non-IID) holds for a GSGM run when claim 1 against ASGD
  holds on every Dirichlet split of the block, which must span two or more values of alpha.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fl_async.bench import stats
from fl_async.bench.records import Records, any_record, dirichlet_alpha
from fl_async.bench.report import records_metrics, sorted_records
from fl_async.bench.scenarios import BASELINE, STABILITY_BASELINE, preset_of
from fl_async.bench.summary import common_seeds, stability_gain, strategy_order
from fl_async.bench.table import estimate_text

from .paired import GAIN_DIGITS, POINT_DIGITS, rounded

STABILITY_CLAIM = 0.20
"""Claim 1: the σ_acc gain over the baseline (``(σ_B − σ_A) / σ_B``) must be at least this."""
ACCURACY_MARGIN = -1.0
"""Claim 1: the lower end of the accuracy difference's interval (points) must be at least this."""
ONLY_CONVERGES = 2 / 5
"""Claim 2: a baseline converging on more than this share of its seeds (2 of 5) refutes "only
GSGM converges"."""
CLAIM_TWO_NODES = 30
"""Claim 2 is the paper's statement at 30 nodes: its rule is shown for splits with this many
nodes or more."""
CANDIDATE = "gsgm"
"""Runs of this preset (the preset and its variants) are judged."""
BASELINES = ("asgd", "trendsmooth", "fedasync", "fedbuff", "dcasgd")
"""The asynchronous baselines a GSGM run is compared with, where the records hold them."""

PerRun = Mapping[str, Mapping[int, Mapping[str, Any]]]


def accuracy_difference(mine: Mapping[int, Any], theirs: Mapping[int, Any]) -> stats.Estimate:
    """Final accuracy of A minus B's in points, mean over the seeds both reached the grid's
    end with, and its interval."""
    common = common_seeds(mine, theirs, "final-accuracy")
    return stats.paired(
        stats.mean,
        [100 * (mine[s]["final-accuracy"] - theirs[s]["final-accuracy"]) for s in common],
    )


def claim_one(accuracy: stats.Estimate, gain: stats.Estimate) -> bool | None:
    """Claim 1's rule on one comparison; None without intervals (fewer than 2 seeds). Both
    estimates are rounded as the table prints them (0.1 point, 1%) before the thresholds, so
    that no verdict turns on floating-point rounding."""
    if None in (accuracy.value, accuracy.low, gain.value, gain.low):
        return None
    accuracy = rounded(accuracy, POINT_DIGITS)
    gain = rounded(gain, GAIN_DIGITS)
    return bool(
        gain.value >= STABILITY_CLAIM
        and gain.low > 0
        and accuracy.value >= 0
        and accuracy.low >= ACCURACY_MARGIN
    )


def candidates(per_run: PerRun) -> list[str]:
    """The GSGM runs of a split (the preset and its variants), in table order."""
    return sorted((n for n in per_run if preset_of(n) == CANDIDATE), key=strategy_order)


def references(per_run: PerRun) -> list[str]:
    """What a GSGM run is compared with: the asynchronous baselines present, then the controls
    (variants of a baseline, e.g. ASGD paced by the white list)."""
    found = [n for n in BASELINES if n in per_run]
    controls = [n for n in per_run if preset_of(n) in BASELINES and n not in BASELINES]
    return found + sorted(controls, key=strategy_order)


def comparison_rows(per_run: PerRun) -> list[dict[str, Any]]:
    """One row per (GSGM run, reference) of one split: the two estimates and claim 1's rule."""
    rows = []
    for mine in candidates(per_run):
        for theirs in references(per_run):
            accuracy = accuracy_difference(per_run[mine], per_run[theirs])
            gain = stability_gain(per_run[mine], per_run[theirs])
            rows.append(
                {
                    "run": mine,
                    "against": theirs,
                    "control": theirs not in BASELINES,
                    "accuracy": accuracy,
                    "gain": gain,
                    "claim": claim_one(accuracy, gain),
                }
            )
    return rows


def converged_counts(per_run: PerRun) -> dict[str, tuple[int, int]]:
    """Per run name: (seeds converged, seeds judged) — converged as the main table defines it."""
    counts = {}
    for name in sorted(per_run, key=strategy_order):
        if name == BASELINE:
            continue
        judged = [m["converged"] for m in per_run[name].values() if m.get("converged") is not None]
        counts[name] = (sum(judged), len(judged))
    return counts


def claim_two(counts: Mapping[str, tuple[int, int]], run: str) -> bool | None:
    """Claim 2's rule for the GSGM run ``run`` on one split, from its ``converged_counts``;
    None if it, or an asynchronous baseline in the records, has fewer than two judged seeds
    (a run stopped by ``max-wall-time`` is not judged: it did not fail to converge)."""
    done, judged = counts.get(run, (0, 0))
    others = [counts[n] for n in BASELINES if n in counts]
    if judged < 2 or any(j < 2 for _, j in others):
        return None
    return done == judged and all(c <= ONLY_CONVERGES * j + 1e-9 for c, j in others)


@dataclass(frozen=True)
class Split:
    """One split of a records folder, as the verdict reads it."""

    per_run: PerRun
    nodes: int | None = None
    alpha: float | None = None
    """The Dirichlet concentration, None for another scheme."""


def verdict_lines(folders: Sequence[tuple[str, Mapping[str, Split]]]) -> list[str]:
    """The Markdown of a verdict block: per folder and split, claim 1's comparisons and the
    convergence counts, with claim 2's rule at 30 nodes or more; claim 3's rule when the
    Dirichlet splits of the block have two or more values of alpha."""
    lines: list[str] = [
        f"Claim 1 holds (yes) when the σ_acc gain is ≥ {STABILITY_CLAIM:.0%} with its interval "
        f"above 0 and the accuracy difference is ≥ 0 with its interval's lower end ≥ "
        f"{ACCURACY_MARGIN:+.1f} pts; rows against a control (a baseline's variant) credit the "
        "aggregation, not the pacing. Intervals: 95% paired bootstrap over seeds.",
    ]
    holds_everywhere: dict[str, list[bool | None]] = {}
    alphas = set()
    for folder, splits in folders:
        for split, found in splits.items():
            per_run = found.per_run
            rows = comparison_rows(per_run)
            lines += ["", f"**{folder}, {split}** (seeds {_seeds(per_run)}):", ""]
            lines += _comparison_table(rows)
            counts = converged_counts(per_run)
            shown = ", ".join(f"{n} {c}/{j}" for n, (c, j) in counts.items())
            lines += ["", f"Converged (seeds): {shown}."]
            if (found.nodes or 0) >= CLAIM_TWO_NODES:
                verdicts = [
                    f"{run}: {_word(claim_two(counts, run))}" for run in candidates(per_run)
                ]
                lines += [
                    f"Claim 2's rule (GSGM converged on every seed, each asynchronous baseline on "
                    f"at most {ONLY_CONVERGES:.0%} of its seeds): "
                    f"{'; '.join(verdicts) or 'no GSGM run'}."
                ]
            if found.alpha is None:
                continue
            alphas.add(found.alpha)
            for row in rows:
                if row["against"] == STABILITY_BASELINE:
                    holds_everywhere.setdefault(row["run"], []).append(row["claim"])
    if len(alphas) > 1 and holds_everywhere:
        shown = "; ".join(
            f"{run}: {_word(None if None in found else all(found))}"
            for run, found in holds_everywhere.items()
        )
        shown_alphas = ", ".join(f"{a:g}" for a in sorted(alphas))
        lines += [
            "",
            f"Claim 3's rule (claim 1 against ASGD at every Dirichlet alpha above: "
            f"{shown_alphas}): {shown}.",
        ]
    return lines


def _comparison_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| GSGM run | against | final acc. − theirs (pts) [95% CI] "
        "| σ_acc gain over theirs [95% CI] | claim 1 |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        against = f"{row['against']} (control)" if row["control"] else row["against"]
        lines.append(
            f"| {row['run']} | {against} | {_points(row['accuracy'])} "
            f"| {_percent(row['gain'])} | {_word(row['claim'])} |"
        )
    return lines if rows else ["No GSGM run or no baseline in these records."]


def _points(estimate: stats.Estimate) -> str:
    return estimate_text(estimate, scale=1.0, digits=1)


def _percent(estimate: stats.Estimate) -> str:
    return estimate_text(estimate, scale=100.0, digits=0, unit="%")


def _word(found: bool | None) -> str:
    return {True: "yes", False: "no", None: "undecided (fewer than 2 seeds)"}[found]


def _seeds(per_run: PerRun) -> str:
    seeds = sorted({seed for by_seed in per_run.values() for seed in by_seed})
    return ", ".join(str(s) for s in seeds)


def records_per_run(records: Mapping[str, Records]) -> dict[str, Split]:
    """Each split of a records folder: its run metrics (each run against its seed's SSGD), its
    number of nodes and its Dirichlet alpha."""
    found = {}
    for split, by_strategy in sorted_records(records).items():
        record = any_record(by_strategy)
        found[split] = Split(
            records_metrics(by_strategy),
            nodes=record["run"].get("num-nodes"),
            alpha=dirichlet_alpha(record["config"]),
        )
    return found
