"""Input checks: each turns bad input into an error naming the value and what is allowed."""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np

Seed = int | np.random.Generator


def as_labels(labels: Any) -> np.ndarray:
    """Return ``labels`` as a 1-D integer numpy array (a list, numpy array or CPU torch tensor)."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("labels must hold at least one sample, got an empty array")
    # Booleans are integers to numpy but never class labels; floats are refused rather than
    # truncated so that 2.5 does not quietly become class 2.
    if array.dtype == np.bool_ or array.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers, got dtype {array.dtype}")
    return array


def as_int(name: str, value: Any) -> int:
    """Return ``value`` as an int; bools and floats (even 3.0) are a TypeError."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def check_range(name: str, value: Any, low: int, high: int | None = None, why: str = "") -> int:
    """Return ``value`` as an int after checking ``low <= value <= high`` (no cap if None)."""
    number = as_int(name, value)
    if number < low or (high is not None and number > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {allowed}{why}, got {number}")
    return number


def check_num_partitions(num_partitions: Any, num_samples: int) -> int:
    """Return ``num_partitions`` after checking ``1 <= num_partitions <= num_samples``."""
    return check_range("num_partitions", num_partitions, 1, num_samples, " (the number of samples)")


def check_alpha(alpha: Any, name: str = "alpha") -> float:
    """Return ``alpha`` as a float after checking it is a finite number > 0."""
    if isinstance(alpha, bool | np.bool_) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"{name} must be a number, got {alpha!r}")
    value = float(alpha)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def as_rng(seed: Seed) -> np.random.Generator:
    """Return the Generator that every random choice of one split comes from.

    An int builds a fresh ``numpy.random.default_rng(seed)``; a Generator is used as it is (and
    advanced). ``None`` is refused: a split drawn from OS entropy could never be reproduced.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int >= 0 or a numpy.random.Generator, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be an int >= 0 or a numpy.random.Generator, got {seed}")
    return np.random.default_rng(int(seed))
