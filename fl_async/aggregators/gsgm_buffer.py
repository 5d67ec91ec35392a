"""GSGM's white list enforced by the aggregator (``schedule="buffer"``; docs/algorithms.md, GSGM).

A node more than ``slack`` applied updates ahead of the slowest counted node has its updates
summed in a buffer of its own; their mean is applied, as one update from that node, when its
turn comes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_async.aggregators.kernels import Arrays, all_finite, max_abs, within_limit
from fl_async.aggregators.updates import Rejected


@dataclass
class Waiting:
    """Node ``k``'s updates held until its turn."""

    total: Arrays
    """The sum of the held deltas, in arrival order."""
    count: int
    weight: float
    """The sum of their staleness weights ``s(tau)``."""
    staleness: int
    """The sum of their staleness."""
    bound: float
    """Bounds ``|total|``."""


class Turns:
    """Applied counts per node, and the updates held until each node's turn."""

    def __init__(self, *, slack: int, num_nodes: int | None) -> None:
        self.slack = slack
        self.num_nodes = num_nodes
        """The nodes expected; those not seen yet count 0 in the minimum (None: only the nodes
        seen count)."""
        self.counts: dict[int, int] = {}  # applied updates per counted node
        self.known: set[int] = set()  # nodes seen or forgotten
        self.waiting: dict[int, Waiting] = {}  # held updates per node

    def minimum(self) -> int:
        """The smallest applied count over the counted nodes; 0 while an expected node
        (``num_nodes``) has not been seen."""
        unseen = self.num_nodes is not None and self.num_nodes > len(self.known)
        return 0 if unseen or not self.counts else min(self.counts.values())

    def must_wait(self, node: int) -> tuple[bool, int]:
        """Whether an update from ``node`` must be held, and the node's applied count (a node
        first seen, or back after ``forget``, enters at the minimum)."""
        count = self.counts.get(node)
        if count is None:
            count = self.minimum()
        return node in self.waiting or count > self.minimum() + self.slack, count

    def record(self, node: int, count: int) -> None:
        """``node`` has ``count`` applied updates."""
        self.counts[node] = count
        self.known.add(node)

    def forget(self, node: int) -> None:
        """``node`` left: its held updates are dropped, and its count leaves the minimum."""
        self.counts.pop(node, None)
        self.waiting.pop(node, None)
        self.known.add(node)

    def hold(
        self, node: int, delta: Arrays, norm: float | None, weight: float, staleness: int
    ) -> None:
        """Add ``delta`` to node ``node``'s held sum (rejected, unchanged, if it overflows)."""
        held = self.waiting.get(node)
        if held is None:
            total = [np.array(d, dtype=np.float32, copy=True) for d in delta]
            bound = max_abs(total) if norm is None else norm
            self.waiting[node] = Waiting(total, 1, weight, staleness, bound)
            return
        bound = math.inf if norm is None else held.bound + norm
        if within_limit({"held": bound}):
            for t, d in zip(held.total, delta, strict=True):
                np.add(t, d, out=t)
        else:
            total = [np.add(t, d) for t, d in zip(held.total, delta, strict=True)]
            if not all_finite(total):
                raise Rejected("overflow")
            held.total, bound = total, max_abs(total)
        held.count += 1
        held.weight += weight
        held.staleness += staleness
        held.bound = bound

    def due(self) -> Iterator[tuple[int, Waiting]]:
        """Pop the held sums of the nodes whose turn has come (ascending node id). Applying
        one never raises the minimum (a node waits only while above it), so one pass finds
        them all."""
        limit = self.minimum() + self.slack
        for node in sorted(self.waiting):
            if self.counts[node] <= limit:
                yield node, self.waiting.pop(node)

    def measure(self) -> None:
        """Exact bounds of the held sums."""
        for held in self.waiting.values():
            held.bound = max_abs(held.total)

    def state_dict(self) -> dict[str, Any]:
        """Copies of the counts and held sums."""
        return {
            "counts": dict(self.counts),
            "known": sorted(self.known),
            "waiting": {
                k: {
                    "total": [t.copy() for t in h.total],
                    "count": h.count,
                    "weight": h.weight,
                    "staleness": h.staleness,
                }
                for k, h in self.waiting.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` (bounds are measured by the caller)."""
        self.counts = {int(k): int(c) for k, c in state["counts"].items()}
        self.known = {int(k) for k in state["known"]}
        self.waiting = {
            int(k): Waiting(
                [np.array(t, dtype=np.float32, copy=True) for t in h["total"]],
                int(h["count"]),
                float(h["weight"]),
                int(h["staleness"]),
                0.0,
            )
            for k, h in state["waiting"].items()
        }
