"""The metrics (docs/bench.md, Metrics) as pure functions of an evaluation series.

A series is two equal-length sequences: virtual times (non-decreasing) and test accuracies; the
bench passes a run's comparison grid (``fl_async.bench.grid``). Nothing here reads files or
knows about Flower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument

CONVERGED_LAST = 5
"""Evaluations averaged at the end of a run to decide whether it converged."""
CONVERGED_FRACTION = 0.9
"""A run converged when its final mean is at least this fraction of SSGD's (same seed)."""
_MARGIN = 1e-9
"""Relative margin on grid times, which are computed as ``T * i / G`` and may be off by an ulp."""


def second_half(
    times: Sequence[float], accuracies: Sequence[float], budget: float | None = None
) -> np.ndarray:
    """The accuracies evaluated after half of ``budget`` (default: the last time), ``t > T / 2``.

    On a grid of G points over T that is the points ``i > G / 2``.
    """
    t = np.asarray(times, dtype=float)
    a = np.asarray(accuracies, dtype=float)
    if t.shape != a.shape:
        raise InvalidArgument(
            f"times and accuracies must have the same length, got {t.size} times and "
            f"{a.size} accuracies"
        )
    if t.size == 0:
        return a
    end = float(t.max()) if budget is None else float(budget)
    # T * (G/2) / G may round a hair above T / 2: the margin keeps that point out of the window.
    return a[t > end / 2 + _MARGIN * abs(end)]


def sigma_acc(
    times: Sequence[float], accuracies: Sequence[float], budget: float | None = None
) -> float | None:
    """Training stability: std (ddof 0) of the accuracies in the second half of the budget.

    None when no evaluation falls there.
    """
    window = second_half(times, accuracies, budget)
    return float(np.std(window)) if window.size else None


def mean_abs_change(
    times: Sequence[float], accuracies: Sequence[float], budget: float | None = None
) -> float | None:
    """Mean absolute change between consecutive evaluations in the same second-half window.

    The same window as ``sigma_acc``, so the two stability figures describe the same evaluations;
    None with fewer than two evaluations there.
    """
    window = second_half(times, accuracies, budget)
    return float(np.mean(np.abs(np.diff(window)))) if window.size >= 2 else None


def first_reached(accuracies: Sequence[float], target: float) -> int | None:
    """The position of the first accuracy ``>= target``; None if none is."""
    for position, accuracy in enumerate(accuracies):
        if accuracy >= target:
            return position
    return None


def time_to_accuracy(
    times: Sequence[float | None], accuracies: Sequence[float], target: float
) -> float | None:
    """The first time at which the accuracy reaches ``target`` (``>=``); None if it never does.

    ``times`` may be virtual or wall times (the bench asks for both on the same grid); a missing
    (None) time gives None.
    """
    if len(times) != len(accuracies):
        raise InvalidArgument(
            f"times and accuracies must have the same length, got {len(times)} times and "
            f"{len(accuracies)} accuracies"
        )
    position = first_reached(accuracies, target)
    return None if position is None or times[position] is None else float(times[position])


def final_mean(accuracies: Sequence[float], last: int = CONVERGED_LAST) -> float | None:
    """The mean of the last ``last`` accuracies (fewer if the run has fewer); None if empty."""
    tail = np.asarray(accuracies[-last:], dtype=float)
    return float(tail.mean()) if tail.size else None


def converged(accuracies: Sequence[float], ssgd_accuracies: Sequence[float]) -> bool | None:
    """Whether the mean of the last 5 accuracies is >= 0.9 x SSGD's (same seed).

    None when either run has no evaluation.
    """
    mine, reference = final_mean(accuracies), final_mean(ssgd_accuracies)
    if mine is None or reference is None:
        return None
    return mine >= CONVERGED_FRACTION * reference


def staleness_stats(updates: Sequence[Mapping[str, Any]]) -> tuple[float | None, int | None]:
    """Mean and maximum staleness over every reply the server received (None, None if none)."""
    values = np.array([u["staleness"] for u in updates], dtype=float)
    if not values.size:
        return None, None
    return float(values.mean()), int(values.max())


def update_counts(updates: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """Replies applied (accepted, buffered included) and rejected by the aggregator."""
    applied = sum(1 for u in updates if u.get("accepted"))
    return applied, len(updates) - applied
