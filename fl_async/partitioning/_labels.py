"""Class codes: each label as the rank of its class, by counting when the label range is small."""

from __future__ import annotations

import numpy as np

# Below this label range a bincount (linear time) replaces np.unique (a full sort); 2**16 counters
# cost 512 KiB, which is nothing next to a label array worth partitioning.
_COUNTING_RANGE = 2**16


def class_codes(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(classes, codes, sizes)``: the sorted distinct labels, each sample's class index
    into ``classes``, and the number of samples of each class."""
    low, high = int(labels.min()), int(labels.max())
    if high - low < _COUNTING_RANGE:
        # Widen first so that subtracting ``low`` cannot overflow a narrow dtype such as int8.
        wide = labels.astype(np.uint64 if labels.dtype.kind == "u" else np.int64, copy=False)
        shifted = (wide - wide.dtype.type(low)).astype(np.intp)
        counts = np.bincount(shifted)
        present = counts > 0
        code_of = np.cumsum(present) - 1
        classes = np.flatnonzero(present).astype(wide.dtype) + wide.dtype.type(low)
        return classes.astype(labels.dtype), code_of[shifted], counts[present]
    classes, codes, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    return classes, codes.reshape(-1), sizes


def compact(values: np.ndarray, bound: int) -> np.ndarray:
    """Return non-negative ``values < bound`` in the narrowest unsigned dtype.

    numpy's stable sort is a radix sort for 8- and 16-bit integers, several times faster than the
    merge sort it uses for wider ones; every grouping step of the schemes sorts such small codes.
    """
    return values.astype(np.min_scalar_type(max(bound - 1, 0)), copy=False)
