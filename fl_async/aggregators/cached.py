"""The base of the rules that cache every node's latest pseudo-gradient ``G[k]`` and keep their
running sum ``S = sum_k G[k]`` (GSGM, MIFA, CA2FL; docs/algorithms.md).

The cache is a ``GradientCache``: in memory up to ``cache_memory`` bytes of gradients (None: no
limit), the nodes beyond it in a memory-mapped file in ``cache_dir`` (None: the system's
temporary directory), with the same results bit for bit. Running bounds on ``|G[k]|`` and
``|S|`` let a rule prove a step finite and run it in place.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from fl_async.aggregators.base import Aggregator
from fl_async.aggregators.cache import (
    CacheUsage,
    GradientCache,
    check_cache_dir,
    check_cache_memory,
)
from fl_async.aggregators.kernels import Arrays, max_abs
from fl_async.aggregators.staleness import StalenessFn

SUM = "S"
"""The running sum of the cached gradients, by name among a rule's accumulators."""


class CachedAggregator(Aggregator):
    """A rule with a per-node gradient cache ``G`` and its running sum ``S``.

    ``forget(k)`` takes ``G[k]`` out of ``S`` and drops it. Subclasses create ``S`` with
    ``_reset_cache()`` in ``_init_state``, and save and restore the cache with
    ``_cache_state()`` / ``_load_cache_state()``.
    """

    tracks_bounds: ClassVar[bool] = True
    """Whether the rule keeps running bounds on ``|G[k]|`` and ``|S|`` (to step in place)."""

    def __init__(
        self,
        *,
        cache_memory: float | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.cache_memory = check_cache_memory("cache_memory", cache_memory)
        """Bytes of cached gradients kept in memory (None: no limit); the rest spill to disk."""
        self.cache_dir = check_cache_dir("cache_dir", cache_dir)
        """Where the file of spilled gradients is made (None: the system's temporary directory)."""
        self._cache = GradientCache(memory=self.cache_memory, directory=self.cache_dir)
        self._bounds: dict[str, float] = {}
        self._cache_bounds: dict[int, float] = {}

    @property
    def num_cached(self) -> int:
        """Nodes whose latest pseudo-gradient is cached."""
        return len(self._cache)

    @property
    def cache_usage(self) -> CacheUsage:
        """How many cached gradients are in memory and on disk, and their bytes."""
        return self._cache.usage

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "cache_memory": self.cache_memory,
            "cache_dir": self.cache_dir,
            **super().hyperparameters(),
        }

    def forget(self, node_id: int) -> None:
        """Drop node ``node_id``'s cached gradient from the sum (``S <- S - G[k]``)."""
        cached = self._cache.get(node_id)
        if cached is None:
            return
        for s, g in zip(self._acc[SUM], cached, strict=True):
            np.subtract(s, g, out=s)
        self._cache.discard(node_id)
        if self.tracks_bounds:
            self._bounds[SUM] += self._cache_bounds.pop(node_id)

    def close(self) -> None:
        """Release the cached gradients now, and with them the file of those that spilled (also
        done when the aggregator is garbage-collected). ``init()`` or ``load_state_dict()`` makes
        it usable again."""
        self._cache.close()
        self._params = None  # apply() and params refuse until init() or load_state_dict()

    def _reset_cache(self) -> None:
        """An empty cache for the model just adopted, and ``S = 0``."""
        self._cache.reset([p.shape for p in self._floats()])
        self._acc[SUM] = self._zeros()

    def _cache_state(self) -> dict[str, Any]:
        """Copies of the cache (in the order nodes were first stored) and of ``S``."""
        return {
            "cache": {k: self._copy_arrays(g) for k, g in self._cache.items()},
            "sum": self._copy_arrays(self._acc[SUM]),
        }

    def _load_cache_state(self, state: dict[str, Any]) -> None:
        """Restore ``_cache_state()``: the nodes placed in the state's order, under this
        aggregator's memory budget."""
        self._cache.reset([p.shape for p in self._floats()])
        for k, g in state["cache"].items():
            self._cache.put(int(k), self._copy_arrays(g))
        self._acc[SUM] = self._copy_arrays(state["sum"])

    def _store(self, node: int, target: Arrays, in_place: bool, norm: float | None) -> None:
        """After a step wrote node ``node``'s new ``G[k]`` into ``target`` (its own slot when
        ``in_place``, else the twin ``"G"``): store it and record its bound (``norm``, or its
        exact maximum when None)."""
        if not in_place:  # what the cache gives back is the next scratch
            self._release_twin("G", self._cache.put(node, target))
        if self.tracks_bounds:
            self._cache_bounds[node] = max_abs(target) if norm is None else norm

    def _target(self, node: int, in_place: bool) -> Arrays:
        """Where a step writes node ``node``'s new ``G[k]``: its slot in the cache (in place; a
        cached ``G[k]`` is read chunk by chunk before it is overwritten), or a scratch twin (a
        row for a new node is reserved now, before any state changes)."""
        if in_place:
            return self._cache.slot(node)
        if node not in self._cache:
            self._cache.make_room()
        return self._twins("G")[0]

    def _measure_cache_bounds(self) -> None:
        """Exact maxima of each cached gradient: where their running bounds start."""
        self._cache_bounds = {k: max_abs(g) for k, g in self._cache.items()}
