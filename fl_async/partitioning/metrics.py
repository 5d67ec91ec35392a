"""How non-IID a split is: the partitions x classes count matrix and distances to the global mix.

Each partition's label distribution is compared with the label distribution of the whole label
array by three distances:

- Hellinger, ``sqrt(1 - sum_c sqrt(p_c q_c))``, in [0, 1];
- Jensen-Shannon distance, the square root of the JS divergence in bits, in [0, 1];
- earth mover's distance as used for non-IID data by Zhao et al. (2018), ``sum_c |p_c - q_c|``,
  in [0, 2] (the EMD when moving mass between any two distinct classes costs 2, which avoids an
  arbitrary order on the classes).

An empty partition has no label distribution: its distances are NaN and the means skip it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument, check_choice

from ._labels import class_codes
from ._validation import as_labels


def count_matrix(labels: Any, partitions: Sequence[Any]) -> np.ndarray:
    """Return the (partitions, classes) matrix of sample counts; columns follow sorted labels."""
    labels = as_labels(labels)
    _, codes, sizes = class_codes(labels)
    indices, owner = _flatten(partitions, labels.size)
    cells = owner * sizes.size + codes[indices]
    return np.bincount(cells, minlength=len(partitions) * sizes.size).reshape(-1, sizes.size)


@dataclass(frozen=True, eq=False)
class Heterogeneity:
    """Label skew and size skew of one split; ``str()`` gives the metrics table.

    Per-partition arrays have one entry per partition, in partition order.
    """

    classes: np.ndarray
    """The distinct labels, sorted: the columns of ``counts``."""
    counts: np.ndarray
    """Samples of each class (columns) in each partition (rows)."""
    hellinger: np.ndarray
    jensen_shannon: np.ndarray
    emd: np.ndarray
    num_samples: int
    """Length of the label array; below ``sizes.sum()`` when a split leaves samples out."""

    @property
    def sizes(self) -> np.ndarray:
        """Number of samples in each partition."""
        return self.counts.sum(axis=1)

    @property
    def gini(self) -> float:
        """Gini coefficient of the partition sizes: 0 when equal, towards 1 when concentrated."""
        sizes = np.sort(self.sizes).astype(np.float64)
        n = sizes.size
        ranks = np.arange(1, n + 1)
        return float(2 * (ranks * sizes).sum() / (n * sizes.sum()) - (n + 1) / n)

    def mean(self, metric: str) -> float:
        """Mean of ``hellinger``, ``jensen_shannon`` or ``emd`` over the non-empty partitions."""
        values = {
            "hellinger": self.hellinger,
            "jensen_shannon": self.jensen_shannon,
            "emd": self.emd,
        }
        return float(np.nanmean(values[check_choice("metric", metric, values)]))

    def to_table(self, per_partition: bool = False) -> str:
        """The metrics as a plain-text table; ``per_partition`` adds one row per partition."""
        sizes = self.sizes
        lines = [
            f"partitions {sizes.size}, classes {self.classes.size}, "
            f"samples {int(sizes.sum())} of {self.num_samples}",
            f"{'distance to global labels':<26}{'mean':>8}{'min':>8}{'max':>8}",
        ]
        for title, values in (
            ("hellinger", self.hellinger),
            ("jensen-shannon", self.jensen_shannon),
            ("earth mover's", self.emd),
        ):
            lines.append(
                f"{title:<26}{np.nanmean(values):>8.3f}"
                f"{np.nanmin(values):>8.3f}{np.nanmax(values):>8.3f}"
            )
        lines.append(
            f"sizes: min {sizes.min()}, median {np.median(sizes):g}, max {sizes.max()}, "
            f"gini {self.gini:.3f}, empty {int((sizes == 0).sum())}"
        )
        if per_partition:
            lines.append(
                f"{'partition':>9}{'size':>9}{'classes':>9}{'hell.':>8}{'JS':>8}{'EMD':>8}"
            )
            held = (self.counts > 0).sum(axis=1)
            for i in range(sizes.size):
                lines.append(
                    f"{i:>9}{sizes[i]:>9}{held[i]:>9}{self.hellinger[i]:>8.3f}"
                    f"{self.jensen_shannon[i]:>8.3f}{self.emd[i]:>8.3f}"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_table()


def heterogeneity(labels: Any, partitions: Sequence[Any]) -> Heterogeneity:
    """Measure how far each partition's label distribution is from that of all ``labels``."""
    labels = as_labels(labels)
    classes, _, class_sizes = class_codes(labels)
    counts = count_matrix(labels, partitions)
    target = class_sizes / labels.size
    sizes = counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = counts / sizes  # rows of empty partitions become NaN, and stay NaN below
        # Rounding can push the Bhattacharyya coefficient a hair above 1.
        hellinger = np.sqrt(np.maximum(1 - np.sqrt(shares * target).sum(axis=1), 0))
        middle = (shares + target) / 2
        divergence = (_kl_bits(shares, middle) + _kl_bits(target, middle)) / 2
        jensen_shannon = np.sqrt(np.maximum(divergence, 0))
    emd = np.abs(shares - target).sum(axis=1)
    return Heterogeneity(classes, counts, hellinger, jensen_shannon, emd, labels.size)


def _kl_bits(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row-wise Kullback-Leibler divergence in bits, with 0 * log(0 / q) = 0."""
    terms = np.where(p > 0, p * np.log2(p / q), 0.0)
    return terms.sum(axis=-1)


def _flatten(partitions: Sequence[Any], num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """All indices concatenated, and the partition each came from; checks they index the labels."""
    if len(partitions) == 0:
        raise InvalidArgument("partitions must hold at least one index array, got none")
    arrays = [np.asarray(part).reshape(-1) for part in partitions]
    for i, array in enumerate(arrays):
        if array.size and array.dtype.kind not in "iu":
            raise InvalidArgument(
                f"partition {i} must hold integer indices, got dtype {array.dtype}"
            )
    indices = np.concatenate(arrays).astype(np.int64, copy=False)
    if indices.size and (indices.min() < 0 or indices.max() >= num_samples):
        raise InvalidArgument(
            f"partition indices must be between 0 and {num_samples - 1} (the number of labels "
            f"- 1), got {indices.min() if indices.min() < 0 else indices.max()}"
        )
    owner = np.repeat(np.arange(len(arrays)), [array.size for array in arrays])
    return indices, owner
