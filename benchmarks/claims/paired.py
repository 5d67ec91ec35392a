"""Exact paired comparisons for the claims study: figures from counts of correct test examples.

A record's grid keeps test accuracies as fractions of the test set; multiplied by its size they
are counts of correct examples, whole numbers. Every figure here starts from those counts, and
every estimate is rounded to the precision it is printed with before a threshold is applied, so
no verdict turns on floating-point rounding (docs/bench.md, "The claims study").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fl_async.bench import metrics, stats
from fl_async.bench.records import Record, comparison_grid

POINT_DIGITS = 1
"""Accuracy differences (points) and grid-index differences are printed, and judged, to 0.1."""
GAIN_DIGITS = 2
"""Stability gains are fractions printed as whole percents: judged to 0.01."""
TARGET_TENTHS = 9
"""The speed target: 9/10 of SSGD's final accuracy on the same seed (in correct examples)."""


@dataclass(frozen=True)
class Run:
    """One finished run as the claims read it: its grid in correct examples out of ``tests``."""

    correct: tuple[int, ...]
    tests: int
    sigma: float | None

    @property
    def final(self) -> int:
        """Correct test examples at the last grid point."""
        return self.correct[-1]


def read_run(record: Record) -> Run | None:
    """The run of ``record``; None when its grid is missing or it was cut before the budget's end
    (a run that ended by its own rule keeps its final model to the end:
    ``fl_async.bench.records.held_to_the_end``)."""
    grid = comparison_grid(record)
    if grid is None or not grid.complete:
        return None
    tests = int(record["run"]["dataset"]["test-examples"])
    correct = tuple(round(accuracy * tests) for accuracy in grid.accuracies)
    return Run(correct, tests, metrics.sigma_acc(grid.times, grid.accuracies, grid.budget))


def read_runs(records: Mapping[str, Mapping[int, Record]]) -> dict[str, dict[int, Run]]:
    """Run name -> seed -> run, for one split; unfinished runs are left out."""
    found: dict[str, dict[int, Run]] = {}
    for name, by_seed in records.items():
        runs = {seed: read_run(record) for seed, record in by_seed.items()}
        found[name] = {seed: run for seed, run in runs.items() if run is not None}
    return found


def rounded(estimate: stats.Estimate, digits: int) -> stats.Estimate:
    """``estimate`` with its value and interval rounded to ``digits`` decimals (as printed)."""

    def cut(value: float | None) -> float | None:
        return None if value is None else round(value, digits) + 0.0  # + 0.0: no -0.0

    return stats.Estimate(
        cut(estimate.value), cut(estimate.low), cut(estimate.high), estimate.seeds
    )


def pairs(mine: Mapping[int, Run], theirs: Mapping[int, Run]) -> list[int]:
    """The seeds both runs finished, ascending."""
    return sorted(set(mine) & set(theirs))


def accuracy_difference(mine: Mapping[int, Run], theirs: Mapping[int, Run]) -> stats.Estimate:
    """Final accuracy of A minus B's, in points: per seed ``100 (c_A − c_B) / n``."""
    values = [100 * (mine[s].final - theirs[s].final) / mine[s].tests for s in pairs(mine, theirs)]
    return rounded(stats.paired(stats.mean, values), POINT_DIGITS)


def curve_difference(mine: Mapping[int, Run], theirs: Mapping[int, Run]) -> stats.Estimate:
    """Mean grid accuracy of A minus B's in points (the area under the curve, per grid point):
    per seed ``100 (Σ c_A − Σ c_B) / (G n)``."""
    values = [
        100
        * (sum(mine[s].correct) - sum(theirs[s].correct))
        / (len(mine[s].correct) * mine[s].tests)
        for s in pairs(mine, theirs)
    ]
    return rounded(stats.paired(stats.mean, values), POINT_DIGITS)


def stability_gain(mine: Mapping[int, Run], theirs: Mapping[int, Run]) -> stats.Estimate:
    """``(σ_B − σ_A) / σ_B`` over the paired seeds, each σ_acc averaged over them."""
    seeds = [s for s in pairs(mine, theirs) if None not in (mine[s].sigma, theirs[s].sigma)]
    estimate = stats.paired(
        stats.relative_reduction,
        [mine[s].sigma for s in seeds],
        [theirs[s].sigma for s in seeds],
    )
    return rounded(estimate, GAIN_DIGITS)


def reach_index(run: Run, reference: Run) -> int:
    """The first grid point (1..G) whose correct count is at least 9/10 of ``reference``'s final
    one (``10 c ≥ 9 c_ref``, exact); G + 1 when none is (the run ends before reaching it)."""
    for index, correct in enumerate(run.correct, start=1):
        if 10 * correct >= TARGET_TENTHS * reference.final:
            return index
    return len(run.correct) + 1


def reach_difference(
    mine: Mapping[int, Run], theirs: Mapping[int, Run], ssgd: Mapping[int, Run]
) -> stats.Estimate:
    """Grid points A needs to reach 90% of SSGD's final accuracy minus B's (negative: A sooner)."""
    seeds = [s for s in pairs(mine, theirs) if s in ssgd]
    values = [reach_index(mine[s], ssgd[s]) - reach_index(theirs[s], ssgd[s]) for s in seeds]
    return rounded(stats.paired(stats.mean, values), POINT_DIGITS)


def converged(run: Run, ssgd: Run, last: int = metrics.CONVERGED_LAST) -> bool:
    """The mean of the last ``last`` grid points is at least 0.9 × SSGD's (same seed), exact:
    ``10 Σ c ≥ 9 Σ c_SSGD`` over those points."""
    return 10 * sum(run.correct[-last:]) >= 9 * sum(ssgd.correct[-last:])


def converged_count(runs: Mapping[int, Run], ssgd: Mapping[int, Run]) -> tuple[int, int]:
    """(seeds converged, seeds judged): the seeds with both the run and SSGD finished."""
    seeds = pairs(runs, ssgd)
    return sum(converged(runs[s], ssgd[s]) for s in seeds), len(seeds)


def flatness(run: Run) -> float:
    """The last quarter's mean grid accuracy minus the third quarter's, in points, rounded to
    0.1: how much a curve still climbs at the end of its budget (the budget rule reads SSGD's)."""
    size = len(run.correct)
    quarter = size // 4
    last, third = run.correct[size - quarter :], run.correct[size - 2 * quarter : size - quarter]
    return round(100 * (sum(last) - sum(third)) / (quarter * run.tests), POINT_DIGITS) + 0.0


def climbing(flatness_values: Sequence[float]) -> float:
    """The budget rule's figure: the mean over seeds of each seed's ``flatness`` with negatives
    counted as 0 (a curve falling at the end is not climbing, and must not cancel one that is),
    rounded to 0.1 point."""
    clipped = [max(value, 0.0) for value in flatness_values]
    return round(sum(clipped) / len(clipped), POINT_DIGITS) + 0.0


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as ``30–39`` when consecutive, else listed."""
    ordered = sorted(seeds)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}–{ordered[-1]}"
    return ", ".join(str(s) for s in ordered) or "none"
