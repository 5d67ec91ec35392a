"""The weight a node's claimed sample count may have (docs/algorithms.md, What a node claims).

A node says how many examples it holds: once when it joins (its identify answer's
``num-examples``; a node that gave none, with its first readable train reply: its *declared*
count) and again in every reply. What a reply claims weighs ``min(claimed, declared, ratio x
M)``, with ``M`` the median of the declared counts of the connected nodes, one per node. A node
cannot raise its weight after it joined, and no node, whatever it declared, weighs more than
``ratio`` times the median node while most nodes are honest. SSGD and OD-SGD weigh updates by
it, and the virtual clock times a node's tasks by it.
"""

from __future__ import annotations

import bisect
import math
from typing import Final

from fl_async.validation import InvalidArgument, check_number

WEIGHT_CAP: Final = 10.0
"""The default ``ratio``. Honest partitions of this repository's splits stay below it: the
largest is at most 8.1 times the median under Dirichlet(0.1), up to 100 nodes (docs/algorithms.md,
What a node claims, has the measured ratios and the splits that pass it)."""


class WeightCap:
    """``min(claimed, declared, floor(ratio x median of the declared counts))``.

    ``ratio`` None or 0 leaves out the median's bound (only the declared count bounds a claim).
    The declared counts are kept sorted: a node joining or leaving costs one insertion into a
    list, and a reply's weight a lookup, however many nodes there are.
    """

    def __init__(self, ratio: float | None = WEIGHT_CAP) -> None:
        self.ratio = _ratio(ratio)
        self._declared: list[int] = []
        """The declared counts of the connected nodes, sorted."""

    def declare(self, count: int) -> None:
        """A node joined, declaring ``count`` examples."""
        bisect.insort(self._declared, count)

    def withdraw(self, count: int) -> None:
        """A node that had declared ``count`` examples left."""
        index = bisect.bisect_left(self._declared, count)
        if index < len(self._declared) and self._declared[index] == count:
            del self._declared[index]

    def limit(self) -> int | None:
        """``floor(ratio x median)`` of the declared counts (None: no median bound now)."""
        if self.ratio is None or not self._declared:
            return None
        counts, middle = self._declared, len(self._declared) // 2
        median = counts[middle] if len(counts) % 2 else (counts[middle - 1] + counts[middle]) / 2
        return math.floor(self.ratio * median)

    def weight(self, claimed: int, declared: int | None) -> int:
        """The weight of ``claimed`` examples from a node that declared ``declared`` (None:
        unknown, as for a node that has left)."""
        bounds = [claimed, *([] if declared is None else [declared])]
        limit = self.limit()
        return min(bounds) if limit is None else min(*bounds, limit)


def _ratio(value: float | None) -> float | None:
    """A checked ``ratio``: None for no median bound (None or 0), else a number >= 1."""
    if value is None:
        return None
    check_number("weight_cap", value, minimum=0)
    if value == 0:
        return None
    if value < 1:
        raise InvalidArgument(
            f"weight_cap must be 0 or None (no bound by the median) or a number >= 1 (a "
            f"multiple of the median declared sample count), got {value!r}"
        )
    return float(value)
