"""Partitioning's own input checks (labels, seeds, counts bounded by the data), built on
``fl_async.validation``: each raises ``InvalidArgument`` naming the value and what is allowed."""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument, check_int, check_seed

Seed = int | np.random.Generator


def as_labels(labels: Any) -> np.ndarray:
    """Return ``labels`` as a 1-D integer numpy array (a list, numpy array or CPU torch tensor)."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise InvalidArgument(f"labels must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise InvalidArgument("labels must hold at least one sample, got an empty array")
    # Booleans are integers to numpy but never class labels; floats are refused rather than
    # truncated so that 2.5 does not quietly become class 2.
    if array.dtype == np.bool_ or array.dtype.kind not in "iu":
        raise InvalidArgument(f"labels must be integers, got dtype {array.dtype}")
    return array


def check_at_most(name: str, value: Any, minimum: int, maximum: int, maximum_is: str) -> int:
    """``value`` as an int in ``[minimum, maximum]``; an error also says what ``maximum`` is
    (``maximum_is``, e.g. "the number of samples"), since the bound comes from the data."""
    try:
        return check_int(name, value, minimum=minimum, maximum=maximum)
    except InvalidArgument as error:
        raise InvalidArgument(f"{error}; {maximum} is {maximum_is}") from None


def check_num_partitions(num_partitions: Any, num_samples: int) -> int:
    """Return ``num_partitions`` after checking ``1 <= num_partitions <= num_samples``."""
    return check_at_most("num_partitions", num_partitions, 1, num_samples, "the number of samples")


def as_rng(seed: Seed) -> np.random.Generator:
    """Return the Generator that every random choice of one split comes from.

    An int builds a fresh ``numpy.random.default_rng(seed)``; a Generator is used as it is (and
    advanced). ``None`` is refused: a split drawn from OS entropy could never be reproduced.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    try:
        return np.random.default_rng(check_seed("seed", seed))
    except InvalidArgument:
        raise InvalidArgument(
            f"seed must be an integer >= 0 or a numpy.random.Generator, got {seed!r}"
        ) from None


def as_owners(owners: Any, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(ids, codes)``: the sorted distinct owner ids of ``owners`` and each sample's
    index into ``ids`` (int64).

    ``owners`` holds one integer or string id per sample (a list, numpy array or CPU tensor).
    """
    array = np.asarray(owners)
    if array.ndim != 1 or array.size != num_samples:
        raise InvalidArgument(
            f"owners must be a 1-D array with one id per sample ({num_samples}), got shape "
            f"{array.shape}"
        )
    if array.size == 0:
        raise InvalidArgument("owners must hold at least one id, got an empty array")
    if array.dtype.kind == "O" and all(isinstance(value, str) for value in array):
        array = array.astype(str)
    # Floats and booleans are refused like labels: 2.0 and 2.5 must not both become owner 2.
    if array.dtype == np.bool_ or array.dtype.kind not in "iuUS":
        raise InvalidArgument(f"owners must be integers or strings, got dtype {array.dtype}")
    ids, codes = np.unique(array, return_inverse=True)
    return ids, codes.reshape(-1).astype(np.int64, copy=False)
