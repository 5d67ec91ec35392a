"""Paired-seed statistics: a figure computed over seeds, with its percentile bootstrap interval.

Two runs of one seed share partitions, initial weights and node speeds, so every comparison is
paired: sample ``k`` holds one value per seed, and the i-th values of all samples belong to the
same seed. A bootstrap resample draws seeds with replacement and keeps the pairs together.
Nothing here knows about runs or files (docs/bench.md, "Gains and their intervals").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument, check_int, check_number

BOOTSTRAP_RESAMPLES = 10_000
"""Resamples per interval."""
BOOTSTRAP_SEED = 13
"""Seed of the ``numpy.random.Generator`` drawing the resamples, fresh for every interval, so an
interval depends only on its own numbers (not on which comparisons came before it)."""
CONFIDENCE = 0.95
"""The interval runs from the 2.5th to the 97.5th percentile of the resampled figures."""

Statistic = Callable[..., Any]
"""Maps one array per sample, seeds on the last axis, to the figure (one per leading index)."""


@dataclass(frozen=True)
class Estimate:
    """A figure over paired seeds and its bootstrap interval (None below 2 seeds)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    seeds: int = 0

    def distinguishable(self, null: float = 0.0) -> bool | None:
        """Whether the interval leaves out ``null``; None when there is no interval."""
        if self.low is None or self.high is None:
            return None
        return not self.low <= null <= self.high

    def as_json(self) -> dict[str, Any]:
        """The fields as plain JSON values."""
        return asdict(self)


def mean(values: np.ndarray) -> np.ndarray:
    """The mean over seeds (a per-seed figure, e.g. a difference or a ratio, averaged)."""
    return np.mean(values, axis=-1)


def relative_reduction(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """``(mean(theirs) - mean(mine)) / mean(theirs)``: e.g. the stability gain of A over B."""
    reference = np.mean(theirs, axis=-1)
    return (reference - np.mean(mine, axis=-1)) / reference


def paired(
    statistic: Statistic,
    *samples: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """``statistic`` of the paired ``samples`` and its bootstrap interval over seeds.

    No seed: value None. One seed: the value, no interval. An undefined value (e.g. a division
    by zero) is None.
    """
    arrays = _paired_arrays(samples)
    n = arrays[0].size
    if n == 0:
        return Estimate(None)
    value = _finite(_apply(statistic, arrays))
    if value is None or n == 1:
        return Estimate(value, seeds=n)
    interval = bootstrap_interval(
        statistic, *arrays, resamples=resamples, seed=seed, confidence=confidence
    )
    low, high = interval if interval is not None else (None, None)
    return Estimate(value, low, high, n)


def bootstrap_interval(
    statistic: Statistic,
    *samples: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of ``statistic`` over resampled seeds.

    Each resample draws ``n`` seeds with replacement (the same draw for every sample); resamples
    where the figure is undefined are left out; None if every one is (or there is no seed).
    """
    arrays = _paired_arrays(samples)
    check_int("resamples", resamples, minimum=1)
    check_number("confidence", confidence, minimum=0, maximum=1, min_open=True, max_open=True)
    n = arrays[0].size
    if n == 0:
        return None
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    figures = np.asarray(_apply(statistic, [a[picks] for a in arrays]), dtype=float)
    figures = figures[np.isfinite(figures)]
    if not figures.size:
        return None
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(figures, [tail, 100 - tail])
    return float(low), float(high)


def _apply(statistic: Statistic, arrays: Sequence[np.ndarray]) -> Any:
    # A reference mean of 0 in a resample is an undefined figure, dropped afterwards: no warning.
    with np.errstate(divide="ignore", invalid="ignore"):
        return statistic(*arrays)


def _paired_arrays(samples: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """The samples as 1-D float arrays of one length (one value per seed)."""
    if not samples:
        raise InvalidArgument("paired statistics need at least one sample, got none")
    arrays = [np.asarray(s, dtype=float) for s in samples]
    sizes = [a.size for a in arrays]
    if any(a.ndim != 1 for a in arrays) or len(set(sizes)) != 1:
        raise InvalidArgument(
            f"paired samples must be flat and hold one value per seed each, got sizes {sizes}"
        )
    if not all(np.isfinite(a).all() for a in arrays):
        raise InvalidArgument("paired samples must be finite numbers, got NaN or infinity")
    return arrays


def _finite(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None
