"""Speed rankings built from a partition's labels, for ``VirtualClock(ranking=...)``.

GSGM was made for fleets where the fast nodes hold particular labels. A ranking lists the stable
ids (partition-ids: row ``i`` of the count matrix is partition ``i``) from fastest to slowest; the
clock then gives the ``i``-th id the ``i``-th smallest ``t_sample``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_FAST = ("few", "many")


def _check_counts(counts: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
    matrix = np.asarray(counts)
    if matrix.ndim != 2 or matrix.dtype.kind not in "iuf":
        raise ValueError(
            f"counts must be a numeric partitions x classes matrix, got shape {matrix.shape} "
            f"of dtype {matrix.dtype}"
        )
    if not np.isfinite(matrix).all() or (matrix < 0).any():
        raise ValueError("counts must be finite and >= 0 (examples per partition and class)")
    return matrix


def ranking_by_classes(
    counts: np.ndarray | Sequence[Sequence[int]], *, fast: str = "few"
) -> list[int]:
    """Partition ids ordered by how many classes each holds: fewest first (``fast="few"``).

    ``fast="many"`` puts the nodes holding the most classes first. Ties go to the smaller id.
    """
    if fast not in _FAST:
        raise ValueError(f"fast must be one of {list(_FAST)}, got {fast!r}")
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
    chosen = sorted({int(c) for c in labels})
    if not chosen or any(c < 0 or c >= matrix.shape[1] for c in chosen):
        raise ValueError(
            f"labels must be a non-empty list of class indices in [0, {matrix.shape[1]}), "
            f"got {list(labels)!r}"
        )
    totals = matrix.sum(axis=1, dtype=np.float64)
    inside = matrix[:, chosen].sum(axis=1, dtype=np.float64)
    share = np.divide(inside, totals, out=np.zeros_like(totals), where=totals > 0)
    return [int(i) for i in np.lexsort((np.arange(len(share)), -share))]
