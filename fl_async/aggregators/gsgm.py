"""GSGM: gradient scheduling with global momentum (ALGORITHMS.md, "GSGM"; a reconstruction).

Wang et al., "Gradient Scheduling With Global Momentum for Asynchronous Federated Learning in
Edge Environment", IEEE IoT Journal 9(19), 2022. The paper's exact equations are not public;
ALGORITHMS.md fixes this reconstruction of its parts 2 and 3. Part 1, the white list that keeps
every node's update frequency even, is the dispatch policy ``fl_async.scheduling.WhiteList``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    IN_PLACE_LIMIT,
    Aggregator,
    Arrays,
    ClientUpdate,
    Rejected,
    check_fraction,
    check_non_negative,
    max_abs,
    probe,
    run_chunked,
    squared_norm,
)
from fl_async.aggregators.staleness import StalenessFn


class GSGM(Aggregator):
    """Partly averaged cached gradients with global momentum.

    On an update from node ``k``: ``S <- S - G[k] + delta``; ``G[k] <- delta``;
    ``g = (1 - rho) * delta + rho * S / n`` (``n`` nodes cached); ``u <- beta * u + s(tau) * g``;
    ``w <- w - lr * u``. The running sum ``S`` makes each update O(model size) for any number
    of nodes.
    """

    name = "GSGM"

    def __init__(
        self,
        *,
        lr: float = 0.1,
        momentum: float = 0.9,
        average_weight: float = 0.5,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.lr = check_non_negative("lr", lr)
        self.momentum = check_fraction("momentum", momentum, low=0.0, high=1.0, high_open=True)
        self.average_weight = check_fraction(
            "average_weight", average_weight, low=0.0, high=1.0, high_open=False
        )

    @property
    def num_cached(self) -> int:
        """Nodes whose latest pseudo-gradient is cached."""
        return len(self._cache)

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "momentum": self.momentum,
            "average_weight": self.average_weight,
            **super().hyperparameters(),
        }

    def forget(self, node_id: int) -> None:
        """Drop node ``node_id``'s cached gradient from the sum (``S <- S - G[k]``)."""
        cached = self._cache.pop(node_id, None)
        if cached is not None:
            for s, g in zip(self._sum, cached, strict=True):
                np.subtract(s, g, out=s)
            self._bounds["S"] += self._cache_bounds.pop(node_id)

    def _init_state(self) -> None:
        self._cache: dict[int, Arrays] = {}
        self._sum = self._zeros()
        self._velocity = self._zeros()
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        size = squared_norm(delta)  # ||delta||^2: bounds it, and checks it
        if not math.isfinite(size):
            raise Rejected("non-finite")
        norm = math.sqrt(size)
        cached = self._cache.get(update.node_id)
        n = len(self._cache) + (cached is None)
        if self._fits(update.node_id, norm, weight, n):
            # The step provably stays finite: update S, u, w and G[k] in place, in one pass.
            target = cached if cached is not None else [np.empty_like(d) for d in delta]
            old = [] if cached is None else [cached]
            lists = [self._sum, self._velocity, target, self._floats()]
            kernel = self._kernel(weight, n, probes=False)
            run_chunked(kernel, *lists, self._sum, self._velocity, self._floats(), delta, *old,
                        scratch=1)  # fmt: skip
            self._cache[update.node_id] = target
            self._cache_bounds[update.node_id] = norm
            return True
        # Too close to overflow to prove it finite: compute into scratch, check, then swap.
        new_sum, new_velocity, new_cached = self._scratch(3)
        old = [] if cached is None else [cached]
        lists = [new_sum, new_velocity, new_cached, self._next, self._sum, self._velocity]
        kernel = self._kernel(weight, n, probes=True)
        total = run_chunked(kernel, *lists, self._floats(), delta, *old, scratch=1)
        self._require_finite(total, [new_sum, new_velocity, self._next], delta, base)
        self._sum, self._pool[0] = new_sum, self._sum
        self._velocity, self._pool[1] = new_velocity, self._velocity
        # The old G[k] becomes scratch; a new node's cache keeps the scratch, and the pool
        # allocates a fresh one when next asked.
        self._cache[update.node_id] = new_cached
        if cached is None:
            self._pool.pop(2)
        else:
            self._pool[2] = cached
        self._swap_next()
        self._cache_bounds[update.node_id] = norm
        self._measure_bounds(caches=False)
        return True

    def _kernel(self, weight: float, n: int, *, probes: bool):
        """The rule on one chunk. Outputs may be the inputs themselves (in place): every input
        value is read before its output is written."""
        rho = self.average_weight

        def kernel(ns, nv, nc, out, s, u, w, d, *rest) -> float:
            *g, tmp = rest
            if g:
                np.subtract(s, g[0], out=ns)
                np.add(ns, d, out=ns)  # S - G[k] + delta
            else:
                np.add(s, d, out=ns)
            np.copyto(nc, d)  # the new G[k], copied while delta is in cache
            # u = beta * u + s(tau) * ((1 - rho) * delta + rho * S / n), as three scaled terms
            np.multiply(u, self.momentum, out=nv)
            np.multiply(d, weight * (1.0 - rho), out=tmp)
            np.add(nv, tmp, out=nv)
            np.multiply(ns, weight * rho / n, out=tmp)
            np.add(nv, tmp, out=nv)
            if self.lr == 1.0:  # 1.0 * u == u exactly: skip a pass
                np.subtract(w, nv, out=out)
            else:
                np.multiply(nv, self.lr, out=tmp)
                np.subtract(w, tmp, out=out)  # w - lr * u
            return probe(out) if probes else 0.0  # S and u reach w through finite factors

        return kernel

    def _fits(self, node_id: int, norm: float, weight: float, n: int) -> bool:
        """Whether the update provably keeps S, u and w below ``IN_PLACE_LIMIT``; if so, record the
        new bounds (``norm`` bounds ``|delta|``, each cache's norm bounds ``|G[k]|``)."""
        b = self._bounds
        s = b["S"] + self._cache_bounds.get(node_id, 0.0) + norm
        rho = self.average_weight
        u = self.momentum * b["u"] + weight * ((1.0 - rho) * norm + rho * s / n)
        w = b["w"] + self.lr * u
        if max(s, u, w) >= IN_PLACE_LIMIT:
            return False
        self._bounds = {"S": s, "u": u, "w": w}
        return True

    def _measure_bounds(self, *, caches: bool = True) -> None:
        """Exact maxima of |S|, |u|, |w| (and of each cache): where the running bounds start."""

        self._bounds = {
            "S": max_abs(self._sum),
            "u": max_abs(self._velocity),
            "w": max_abs(self._floats()),
        }
        if caches:
            self._cache_bounds = {k: max_abs(g) for k, g in self._cache.items()}

    def _rule_state(self) -> dict[str, Any]:
        return {
            "cache": {k: self._copy_arrays(g) for k, g in self._cache.items()},
            "sum": self._copy_arrays(self._sum),
            "velocity": self._copy_arrays(self._velocity),
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._cache = {k: self._copy_arrays(g) for k, g in state["cache"].items()}
        self._sum = self._copy_arrays(state["sum"])
        self._velocity = self._copy_arrays(state["velocity"])
        self._measure_bounds()
