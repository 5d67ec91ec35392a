"""What the update guard measures an update against: the nodes' votes on its size, the recent
aggregate direction, and whose updates alone pass (docs/algorithms.md, The update guard).

``Votes``: one vote per node, the norm of its latest arriving update, over the last ``window``
nodes; ``M`` is their median. ``Direction``: ``m``, an exponential average of accepted updates,
each capped at norm ``M``, and whether it is coherent enough to judge a direction by.
``SoleNode``: how long only one node's updates have been accepted while the guard refused the
others'.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from fl_async.aggregators.kernels import run_chunked
from fl_async.validation import InvalidArgument, check_number

COHERENCE: Final = 2.0
"""``m`` judges directions once ``|m̂| sqrt(k) >= COHERENCE * M`` (``k`` the effective number
of nodes averaged): updates pointing every which way average to about ``M / sqrt(k)``."""
OLD_WINDOW: Final = -1
"""The node a window saved before one vote per node stands for (no stable id is negative)."""


def dot(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """``sum(a_i * b_i)`` over aligned float arrays (chunked BLAS dots)."""
    return run_chunked(lambda x, y: float(np.dot(x, y)), a, b)


class Votes:
    """Node -> the norm of its latest arriving update, least recently heard node first."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._norms: OrderedDict[int, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._norms)

    def cast(self, node: int, norm: float) -> None:
        """``node``'s vote becomes ``norm``, and the node the most recent of the window."""
        self._norms.pop(node, None)
        self._norms[node] = norm
        while len(self._norms) > self.window:
            self._norms.popitem(last=False)

    def median(self) -> float | None:
        """``M``, the median of the votes (None without any)."""
        return statistics.median(self._norms.values()) if self._norms else None

    def state(self) -> list[list[float]]:
        """``[node, norm]`` pairs, least recently heard node first."""
        return [[node, norm] for node, norm in self._norms.items()]

    def load(self, saved: list[Any]) -> None:
        """Restore ``state()``. A window of plain norms (one per update, saved before one vote
        per node) comes back as one vote, its median, of a node no longer heard from."""
        if saved and not isinstance(saved[0], list | tuple):
            saved = [[OLD_WINDOW, statistics.median(float(n) for n in saved)]]
        self._norms = OrderedDict((int(n), float(v)) for n, v in saved[-self.window :])


class Direction:
    """``m``, an exponential average of accepted updates, each capped at norm ``M`` and weighted
    by its node's gap (``add``), so that each node, fast or slow, counts about equally."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._m: list[np.ndarray] | None = None
        self._s1 = 0.0  # the sum of the average's weights
        self._s2 = 0.0  # the sum of their squares: k = s1^2 / s2 updates' worth
        self._t = 0
        self._last: OrderedDict[int, int] = OrderedDict()  # node -> t after its last update

    def add(self, floats: Sequence[np.ndarray], node: int, cap: float, voters: int) -> None:
        """Average in an accepted update of ``node`` (its floating arrays), times ``cap``.

        With ``N`` voters, ``beta = 1 - 1/N`` (about one round of updates counts), and the
        update's weight is ``min(gap, 4N) / N``, ``gap`` the updates accepted since the node's
        last one (``N`` for its first): a fast node's many updates weigh what a slow node's one
        does."""
        n = max(2, voters)
        beta = 1 - 1 / n
        gap = self._t - self._last[node] if node in self._last else n
        weight = min(gap, 4 * n) / n
        if self._m is None:
            self._m = [np.zeros_like(a, dtype=np.float32) for a in floats]
        for m, a in zip(self._m, floats, strict=True):
            m *= np.float32(beta)
            m += np.float32((1 - beta) * weight * cap) * a
        self._s1 = beta * self._s1 + (1 - beta) * weight
        self._s2 = beta**2 * self._s2 + ((1 - beta) * weight) ** 2
        self._t += 1
        self._last.pop(node, None)
        self._last[node] = self._t
        while len(self._last) > self.window:
            self._last.popitem(last=False)

    def cosine(
        self, floats: Sequence[np.ndarray], norm: float, median: float, voters: int
    ) -> float | None:
        """The cosine of an update (norm ``norm``) with ``m``; None while ``m`` is not coherent
        (``coherent``, over at most ``voters`` nodes' worth of updates)."""
        if self._m is None or self._s2 == 0:
            return None
        size = math.sqrt(dot(self._m, self._m))
        count = min(self._s1**2 / self._s2, voters)
        if not coherent(size / self._s1, count, median):
            return None
        return dot(floats, self._m) / (norm * size)

    def state(self) -> dict[str, Any]:
        """``m`` (copies), its weights' sums, ``t`` and each node's last ``t``."""
        return {
            "m": None if self._m is None else [m.copy() for m in self._m],
            "s1": self._s1,
            "s2": self._s2,
            "t": self._t,
            "last": [[node, t] for node, t in self._last.items()],
        }

    def load(self, saved: dict[str, Any]) -> None:
        """Restore ``state()``."""
        m = saved["m"]
        self._m = None if m is None else [np.array(a, dtype=np.float32, copy=True) for a in m]
        self._s1, self._s2, self._t = float(saved["s1"]), float(saved["s2"]), int(saved["t"])
        self._last = OrderedDict((int(n), int(t)) for n, t in saved["last"])


def coherent(size: float, count: float, median: float) -> bool:
    """Whether an average of norm ``size`` over ``count`` updates (an effective number, for a
    weighted one) points somewhere: ``size * sqrt(count) >= COHERENCE * median``, and finite."""
    return math.isfinite(size) and size > 0 and size * math.sqrt(count) >= COHERENCE * median


def cosine_with_others(
    update: Sequence[np.ndarray],
    norm: float,
    total: Sequence[np.ndarray],
    mine: Sequence[np.ndarray],
    voters: int,
    median: float,
) -> float | None:
    """The cosine of an update (floating arrays ``update``, norm ``norm``) with the sum of the
    other voters' capped updates (``total`` less its own, ``mine``); None unless that sum is
    ``coherent``."""
    others = [t - c for t, c in zip(total, mine, strict=True)]
    size = math.sqrt(dot(others, others))
    if not coherent(size / max(1, voters - 1), voters - 1, median):
        return None
    return dot(update, others) / (norm * size)


class SoleNode:
    """The stretch of decided replies since an update of a node other than ``node`` was
    accepted: its length, the guard's refusals of other nodes in it, ``node``'s acceptances."""

    def __init__(self) -> None:
        self.node: int | None = None
        self.stretch = 0
        self.refused = 0
        self.accepted = 0

    def note(self, node: int, *, accepted: bool, refused: bool) -> None:
        """Count one decided reply of ``node`` (accepted by the rule, or refused by the guard)."""
        if accepted and node != self.node:
            self.node, self.stretch, self.refused, self.accepted = node, 0, 0, 0
        self.stretch += 1
        self.refused += int(refused and node != self.node)
        self.accepted += int(accepted)

    def stuck(self, patience: int) -> bool:
        """Whether for ``patience`` replies or more only ``node``'s updates were accepted, more
        than once, and at least half of those replies were the guard refusing other nodes."""
        return self.stretch >= patience and 2 * self.refused >= self.stretch and self.accepted > 1

    def state(self) -> list[int | None]:
        """``[node, stretch, refused, accepted]``."""
        return [self.node, self.stretch, self.refused, self.accepted]

    def load(self, saved: list[Any]) -> None:
        """Restore ``state()``."""
        node, *counts = saved
        self.stretch, self.refused, self.accepted = (int(c) for c in counts)
        self.node = None if node is None else int(node)


def clip(arrays: Sequence[np.ndarray], scale: float) -> list[np.ndarray]:
    """``arrays`` with their floating ones multiplied by ``scale`` (new arrays of the same
    dtype; the others as they are)."""
    return [(a * scale).astype(a.dtype, copy=False) if a.dtype.kind == "f" else a for a in arrays]


def floats(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The floating arrays of ``arrays`` (the others are counters, not directions)."""
    return [a for a in arrays if a.dtype.kind == "f"]


def scaled(arrays: list[np.ndarray], scale: float) -> list[np.ndarray]:
    """New float32 arrays: ``arrays`` times ``scale``."""
    return [np.multiply(a, np.float32(scale), dtype=np.float32) for a in arrays]


def summed(lists: list[list[np.ndarray]]) -> list[np.ndarray]:
    """The arraywise sum of aligned lists of arrays (new arrays; [] for none)."""
    if not lists:
        return []
    total = [a.copy() for a in lists[0]]
    for arrays in lists[1:]:
        for t, a in zip(total, arrays, strict=True):
            t += a
    return total


def guard_factor(value: float | None) -> float | None:
    """A checked ``factor``: None for off (None or 0), else a number >= 1."""
    if value is None:
        return None
    check_number("factor", value, minimum=0)
    if value == 0:
        return None
    if value < 1:
        raise InvalidArgument(
            f"factor must be 0 or None (off) or a number >= 1 (a multiple of the median), "
            f"got {value!r}"
        )
    return float(value)
