"""Speed rankings built from a partition's labels, for ``VirtualClock(ranking=...)``.

GSGM was made for fleets where the fast nodes hold particular labels. A ranking lists the stable
ids (partition-ids: row ``i`` of the count matrix is partition ``i``) from fastest to slowest; the
clock then gives the ``i``-th id the ``i``-th smallest ``t_sample``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.validation import InvalidArgument, check_choice, check_int

_FAST = ("few", "many")


def _check_counts(counts: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
    matrix = np.asarray(counts)
    if matrix.ndim != 2 or matrix.dtype.kind not in "iuf":
        raise InvalidArgument(
            f"counts must be a numeric partitions x classes matrix, got shape {matrix.shape} "
            f"of dtype {matrix.dtype}"
        )
    bad = matrix[~np.isfinite(matrix) | (matrix < 0)]
    if bad.size:
        raise InvalidArgument(
            "counts must be finite and >= 0 (examples per partition and class), "
            f"got {bad[0].item()!r}"
        )
    return matrix


def ranking_by_classes(
    counts: np.ndarray | Sequence[Sequence[int]], *, fast: str = "few"
) -> list[int]:
    """Partition ids ordered by how many classes each holds: fewest first (``fast="few"``).

    ``fast="many"`` puts the nodes holding the most classes first. Ties go to the smaller id.
    """
    check_choice("fast", fast, _FAST)
    held = (_check_counts(counts) > 0).sum(axis=1)
    key = held if fast == "few" else -held
    # lexsort sorts by its last key first: classes held, then partition id.
    return [int(i) for i in np.lexsort((np.arange(len(held)), key))]


def ranking_by_labels(
    counts: np.ndarray | Sequence[Sequence[int]], labels: Sequence[int]
) -> list[int]:
    """Partition ids ordered by their share of examples in ``labels``, largest share first.

    Partitions without examples have share 0; ties go to the smaller id.
    """
    matrix = _check_counts(counts)
    last = matrix.shape[1] - 1
    chosen = sorted({check_int("labels entry", c, minimum=0, maximum=last) for c in labels})
    if not chosen:
        raise InvalidArgument(f"labels must list at least one class index, got {labels!r}")
    totals = matrix.sum(axis=1, dtype=np.float64)
    inside = matrix[:, chosen].sum(axis=1, dtype=np.float64)
    share = np.divide(inside, totals, out=np.zeros_like(totals), where=totals > 0)
    return [int(i) for i in np.lexsort((np.arange(len(share)), -share))]
