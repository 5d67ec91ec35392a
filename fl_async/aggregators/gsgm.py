"""GSGM: gradient scheduling with global momentum (docs/algorithms.md, GSGM; a reconstruction).

Wang et al., "Gradient Scheduling With Global Momentum for Asynchronous Federated Learning in
Edge Environment", IEEE IoT Journal 9(19), 2022. The paper's exact equations are not public;
docs/algorithms.md (GSGM) fixes this reconstruction of its parts 2 and 3. Part 1, the white list
that keeps every node's update frequency even, is the dispatch policy
``fl_async.scheduling.WhiteList``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, max_abs, probe, within_limit
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, norm_bound
from fl_async.validation import check_number


def gsgm_reference(
    state: dict[str, Any],
    node: int,
    delta: Arrays,
    weight: float,
    *,
    lr: float,
    momentum: float,
    average_weight: float,
) -> dict[str, Any]:
    """One GSGM update from node ``node`` as docs/algorithms.md (GSGM) writes it: the readable
    rule that ``GSGM``'s fast kernel is tested against, bit for bit (same float32 operations in
    the same order). ``state`` holds ``w``, ``S``, ``u`` (lists of float32 arrays) and ``G``
    (node id -> its cached pseudo-gradient); the new state is returned."""
    rho, beta = average_weight, momentum
    cached = state["G"].get(node, [np.zeros_like(d) for d in delta])
    S = [s - g + d for s, g, d in zip(state["S"], cached, delta, strict=True)]
    G = {**state["G"], node: [d.copy() for d in delta]}
    n = len(G)
    # u <- beta u + s(tau) g, where g = (1 - rho) delta + rho S / n: s(tau) enters both terms
    u = [
        beta * u_k + weight * (1 - rho) * d + weight * rho / n * s
        for u_k, d, s in zip(state["u"], delta, S, strict=True)
    ]
    w = [w_k - lr * u_k for w_k, u_k in zip(state["w"], u, strict=True)]
    return {"w": w, "S": S, "u": u, "G": G}


class GSGM(Aggregator):
    """Partly averaged cached gradients with global momentum.

    On an update from node ``k``: ``S <- S - G[k] + delta``; ``G[k] <- delta``;
    ``g = (1 - rho) * delta + rho * S / n`` (``n`` nodes cached); ``u <- beta * u + s(tau) * g``;
    ``w <- w - lr * u``. The running sum ``S`` makes each update O(model size) for any number
    of nodes. ``gsgm_reference`` states the same rule without the fast machinery.
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
        self.lr = check_number("lr", lr, minimum=0)
        self.momentum = check_number("momentum", momentum, minimum=0, maximum=1, max_open=True)
        self.average_weight = check_number("average_weight", average_weight, minimum=0, maximum=1)

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
            for s, g in zip(self._acc["S"], cached, strict=True):
                np.subtract(s, g, out=s)
            self._bounds["S"] += self._cache_bounds.pop(node_id)

    def _init_state(self) -> None:
        self._cache: dict[int, Arrays] = {}
        self._acc["S"] = self._zeros()
        self._acc["u"] = self._zeros()
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        norm = norm_bound(delta)  # bounds |delta|, and rejects NaN/Inf
        node = update.node_id
        cached = self._cache.get(node)
        n = len(self._cache) + (cached is None)
        # In place when the bounds prove the step finite; else into scratch, checked, published.
        in_place = norm is not None and self._fits(node, norm, weight, n)
        if not in_place:
            target = self._twins("G")[0]
        elif cached is None:
            target = [np.empty_like(d) for d in delta]
        else:
            target = cached  # G[k] is read before it is overwritten, chunk by chunk
        inputs = [delta, target, *([] if cached is None else [cached])]
        names = ("S", "u", MODEL)
        kernel = self._kernel(weight, n, probes=not in_place)
        self._advance(kernel, names, inputs, in_place=in_place, delta=delta, base=base, scratch=1)
        if not in_place:  # the new G[k] is kept; the old one (if any) is the next scratch
            self._release_twin("G", cached)
            self._measure_bounds(caches=False)
        self._cache[node] = target
        self._cache_bounds[node] = max_abs(target) if norm is None else norm
        return APPLIED

    def _kernel(self, weight: float, n: int, *, probes: bool) -> Callable[..., float]:
        """The rule on one chunk, with or without probes. Outputs may be the inputs themselves
        (in place): every input value is read before its output is written."""
        rho = self.average_weight

        def kernel(ns, s, nv, u, out, w, d, nc, *rest) -> float:
            *g, tmp = rest
            if g:
                np.subtract(s, g[0], out=ns)
                np.add(ns, d, out=ns)  # S - G[k] + delta
            else:
                np.add(s, d, out=ns)
            np.copyto(nc, d)  # the new G[k], copied while delta is in cache
            # u = beta * u + s(tau) * ((1 - rho) * delta + rho * S / n), as three terms
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
        """Whether the update provably keeps S, u and w below ``IN_PLACE_LIMIT``; if so, record
        the new bounds (``norm`` bounds ``|delta|``, each cache's norm bounds ``|G[k]|``)."""
        b = self._bounds
        s = b["S"] + self._cache_bounds.get(node_id, 0.0) + norm
        rho = self.average_weight
        u = self.momentum * b["u"] + weight * ((1.0 - rho) * norm + rho * s / n)
        new = {"S": s, "u": u, "w": b["w"] + self.lr * u}
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self, *, caches: bool = True) -> None:
        """Exact maxima of |S|, |u|, |w| (and of each cache): where the running bounds start."""
        self._bounds = {
            "S": max_abs(self._acc["S"]),
            "u": max_abs(self._acc["u"]),
            "w": max_abs(self._floats()),
        }
        if caches:
            self._cache_bounds = {k: max_abs(g) for k, g in self._cache.items()}

    def _rule_state(self) -> dict[str, Any]:
        return {
            "cache": {k: self._copy_arrays(g) for k, g in self._cache.items()},
            "sum": self._copy_arrays(self._acc["S"]),
            "velocity": self._copy_arrays(self._acc["u"]),
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._cache = {k: self._copy_arrays(g) for k, g in state["cache"].items()}
        self._acc["S"] = self._copy_arrays(state["sum"])
        self._acc["u"] = self._copy_arrays(state["velocity"])
        self._measure_bounds()
