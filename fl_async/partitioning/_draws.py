"""The drawing helpers of the split schemes (``schemes.py``): checks of their options, the class
orderings and groupings, and the count splits they share. Every draw comes from the
``numpy.random.Generator`` the scheme passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.validation import check_bool, check_int, check_number

from ._labels import compact
from ._validation import check_at_most

Partitions = list[np.ndarray]


def _check_min_size(min_partition_size: Any, num_samples: int, num_partitions: int) -> int:
    return check_at_most(
        "min_partition_size",
        min_partition_size,
        0,
        num_samples // num_partitions,
        "the number of samples // num_partitions",
    )


def _check_dirichlet_options(
    alpha: Any,
    min_partition_size: Any,
    self_balancing: Any,
    max_tries: Any,
    num_samples: int,
    num_partitions: int,
) -> tuple[float, int, int]:
    """Check :func:`dirichlet`'s options; return alpha, min_partition_size and max_tries."""
    alpha = check_number("alpha", alpha, minimum=0, min_open=True)
    min_partition_size = _check_min_size(min_partition_size, num_samples, num_partitions)
    max_tries = check_int("max_tries", max_tries, minimum=1)
    check_bool("self_balancing", self_balancing)
    return alpha, min_partition_size, max_tries


def _dirichlet_draw(
    rng: np.random.Generator,
    alpha: float,
    num_partitions: int,
    class_sizes: np.ndarray,
    num_samples: int,
    self_balancing: bool,
) -> Callable[[], np.ndarray]:
    """Return a function drawing one classes x partitions count matrix for :func:`dirichlet`."""
    concentration = np.full(num_partitions, alpha)

    def draw() -> np.ndarray:
        """Draw class shares from Dir(alpha) and turn them into counts."""
        shares = rng.dirichlet(concentration, size=class_sizes.size)
        if self_balancing:
            return _balanced_counts(shares, class_sizes, num_samples / num_partitions)
        return _split_counts(shares, class_sizes)

    return draw


def _order_by_class(codes: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Sample indices grouped by class in ascending order, in random order within each class."""
    shuffled = rng.permutation(codes.size)
    return shuffled[np.argsort(compact(codes[shuffled], num_classes), kind="stable")]


def _group(owner: np.ndarray, num_partitions: int, rng: np.random.Generator) -> Partitions:
    """Index arrays of partitions 0..p-1 given each sample's owner (p: unassigned), shuffled."""
    shuffled = rng.permutation(owner.size)
    order = shuffled[np.argsort(compact(owner[shuffled], num_partitions + 1), kind="stable")]
    sizes = np.bincount(owner, minlength=num_partitions + 1)[:num_partitions]
    return np.split(order[: sizes.sum()], np.cumsum(sizes)[:-1])


def _split_counts(shares: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Integer counts per row summing to ``totals``, cut where the cumulative shares fall.

    The cut points are those of flwr-datasets and NIID-Bench, ``floor(cumsum(shares) * total)``,
    with the last pinned to the total because the cumulative sum can end a rounding error below 1.
    """
    cuts = np.floor(np.cumsum(shares, axis=1) * totals[:, None]).astype(np.int64)
    cuts[:, -1] = totals
    np.minimum(cuts, totals[:, None], out=cuts)
    return np.diff(cuts, axis=1, prepend=0)


def _balanced_counts(shares: np.ndarray, class_sizes: np.ndarray, average: float) -> np.ndarray:
    """``_split_counts`` class by class, skipping partitions already above ``average`` samples."""
    counts = np.empty(shares.shape, dtype=np.int64)
    sizes = np.zeros(shares.shape[1], dtype=np.int64)
    for c, share in enumerate(shares):
        open_ = sizes <= average
        share = np.where(open_, share, 0.0)
        # With a tiny alpha the open partitions' shares can all underflow to zero; they then
        # split the class evenly rather than dividing by zero.
        share = share / share.sum() if share.sum() > 0 else open_ / open_.sum()
        counts[c] = _split_counts(share[None, :], class_sizes[c : c + 1])[0]
        sizes += counts[c]
    return counts


def _draw_until_large_enough(
    draw: Callable[[], np.ndarray],
    min_partition_size: int,
    max_tries: int,
    scheme: str,
    alpha: float,
    num_partitions: int,
) -> np.ndarray:
    """Call ``draw`` (counts, classes x partitions) until every partition is big enough."""
    for _ in range(max_tries):
        counts = draw()
        smallest = int(counts.sum(axis=0).min())
        if smallest >= min_partition_size:
            return counts
    raise ValueError(
        f"{scheme} left a partition below min_partition_size={min_partition_size} in all "
        f"max_tries={max_tries} draws (the last draw's smallest had {smallest} samples); "
        f"lower min_partition_size, raise alpha (got {alpha}) or use fewer partitions "
        f"(got {num_partitions})"
    )


def _choose_classes(
    num_classes: int, num_partitions: int, k: int, rng: np.random.Generator
) -> np.ndarray:
    """A (num_partitions, k) array of class codes, distinct within each row.

    Class ``must[t]`` goes to partition ``t % num_partitions`` first, which covers every class when
    ``num_partitions * k >= num_classes`` and never gives a partition more than k of them; random
    sort keys then fill each row with distinct other classes.
    """
    must = rng.permutation(num_classes)[: min(num_classes, num_partitions * k)]
    keys = rng.random((num_partitions, num_classes), dtype=np.float32)
    keys[np.arange(must.size) % num_partitions, must] = -1.0
    return np.argsort(keys, axis=1)[:, :k]
