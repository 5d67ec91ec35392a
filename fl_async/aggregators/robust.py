"""Robust combination of a buffer of updates: coordinate-wise median or trimmed mean.

docs/algorithms.md, Robust combination of a buffer: FedBuff and SSGD may combine the updates of
a step coordinate by coordinate with the median, or with the mean of what is left once the
``floor(trim * K)`` smallest and largest values are cut (as Flower's ``FedMedian`` and
``FedTrimmedAvg`` do for a round), instead of the (weighted) mean. A few updates far out of
line, in size or direction, then move the step little. ``combine_reference`` is the plain
version of the chunked ``combine_chunk`` that the rules run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from fl_async.validation import InvalidArgument, check_choice, check_number

MEAN: Final = "mean"
MEDIAN: Final = "median"
TRIMMED_MEAN: Final = "trimmed-mean"
COMBINES: Final = (MEAN, MEDIAN, TRIMMED_MEAN)
"""The ways a buffered rule may combine its updates (``combine=``)."""
TRIM: Final = 0.2
"""The default fraction cut from each end by the trimmed mean (Flower's FedTrimmedAvg's)."""


def check_combine(combine: str, trim: float) -> tuple[str, float]:
    """``combine`` and ``trim``, checked: one of ``COMBINES``, and a fraction in [0, 0.5)."""
    check_choice("combine", combine, COMBINES)
    trim = check_number("trim", trim, minimum=0, maximum=0.5, max_open=True)
    if combine != TRIMMED_MEAN and trim != TRIM:
        raise InvalidArgument(
            f"trim goes with combine='trimmed-mean' only, got combine={combine!r}, trim={trim}"
        )
    return combine, float(trim)


def cut(count: int, trim: float) -> int:
    """Values cut from each end of ``count`` by a trimmed mean: ``floor(trim * count)``."""
    return int(trim * count)


def combine_chunk(out: np.ndarray, chunks: Sequence[np.ndarray], combine: str, trim: float) -> None:
    """Write into ``out`` the coordinate-wise median or trimmed mean of ``chunks`` (K aligned
    flat chunks of updates)."""
    stacked = np.stack(chunks)
    if combine == MEDIAN:
        np.median(stacked, axis=0, out=out)
        return
    k = cut(len(chunks), trim)
    if k:
        stacked.sort(axis=0)
        stacked = stacked[k : len(chunks) - k]
    np.mean(stacked, axis=0, out=out)


def combine_reference(
    updates: Sequence[Sequence[np.ndarray]], combine: str, trim: float = TRIM
) -> list[np.ndarray]:
    """The plain rule: per array, the median (or trimmed mean) over the K updates of each
    coordinate, in the updates' own floating dtype (the values are sorted only when some are
    cut, as the kernel does: a mean's sum runs in the updates' order)."""
    combined = []
    for arrays in zip(*updates, strict=True):
        stacked = np.stack([np.asarray(a) for a in arrays])
        if combine == MEDIAN:
            combined.append(np.median(stacked, axis=0))
            continue
        k = cut(len(arrays), trim)
        kept = np.sort(stacked, axis=0)[k : len(arrays) - k] if k else stacked
        combined.append(kept.mean(axis=0))
    return combined
