"""MIFA: memory-augmented impatient FedAvg (Gu, Huang, Zhang, Huang, NeurIPS 2021;
docs/algorithms.md, MIFA).

Every update steps with the average of the latest pseudo-gradient of every node, the nodes not
heard from lately counting with the one they sent last: ``S <- S - G[k] + delta``;
``G[k] <- delta``; ``w <- w - lr_t * S / n``. ``fl_async.aggregators.reference.mifa`` states the
rule in plain numpy;
``MIFA`` runs it as one fused chunk kernel, in place when running bounds prove it finite.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, HELD, MODEL, Status
from fl_async.aggregators.cached import SUM, CachedAggregator
from fl_async.aggregators.gsgm_kernels import cache_chunk
from fl_async.aggregators.kernels import Arrays, max_abs, probe, within_limit
from fl_async.aggregators.updates import ClientUpdate, norm_bound
from fl_async.validation import check_bool, check_choice, check_int, check_number

LR_SCHEDULES = ("constant", "inverse")
"""``lr_t = lr`` (``constant``) or ``lr / (t + 1)`` after ``t`` server steps (``inverse``)."""


def scheduled_lr(lr: float, schedule: str, steps: int) -> float:
    """The rate of the step that follows ``steps`` server steps."""
    return lr / (steps + 1) if schedule == "inverse" else lr


class MIFA(CachedAggregator):
    """Step with the average of every node's latest pseudo-gradient, on every update.

    ``n = max(num_nodes, nodes cached)`` (``num_nodes`` None: the nodes cached; the preset sets
    N, the number of nodes at start, so a node not heard from yet counts as zero). ``warmup``:
    no step until ``num_nodes`` distinct nodes have reported once (their updates are cached and
    the update says ``held``; with ``num_nodes`` None there is nothing to wait for), as the
    authors' waiting variant. ``lr_schedule="inverse"``:
    ``lr_t = lr / (t + 1)``. No staleness weight. The cache is GSGM's (``cache_memory``,
    ``cache_dir``).
    """

    name = "MIFA"

    def __init__(
        self,
        *,
        lr: float = 1.0,
        num_nodes: int | None = None,
        warmup: bool = False,
        lr_schedule: str = "constant",
        cache_memory: float | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(
            cache_memory=cache_memory,
            cache_dir=cache_dir,
            staleness=None,
            max_staleness=max_staleness,
        )
        self.lr = check_number("lr", lr, minimum=0)
        self.num_nodes = check_int("num_nodes", num_nodes, minimum=1, allow_none=True)
        self.warmup = check_bool("warmup", warmup)
        self.lr_schedule = check_choice("lr_schedule", lr_schedule, LR_SCHEDULES)

    @property
    def steps(self) -> int:
        """Server steps taken by the rule (``t`` of the schedule)."""
        return self._t

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "num_nodes": self.num_nodes,
            "warmup": self.warmup,
            "lr_schedule": self.lr_schedule,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        self._reset_cache()
        self._t = 0
        self._measure_bounds()

    def _warming(self, cached_after: int) -> bool:
        """Whether the step waits: ``warmup`` and fewer than ``num_nodes`` nodes reported before
        the first step."""
        waits = self.warmup and self.num_nodes is not None and self._t == 0
        return waits and cached_after < self.num_nodes

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        norm = norm_bound(delta)  # bounds |delta|, and rejects NaN/Inf
        node = update.node_id
        cached = self._cache.get(node)
        cached_after = len(self._cache) + (cached is None)
        n = cached_after if self.num_nodes is None else max(self.num_nodes, cached_after)
        steps = not self._warming(cached_after)
        scale = scheduled_lr(self.lr, self.lr_schedule, self._t) / n if steps else 0.0
        in_place = norm is not None and self._fits(node, norm, scale)
        target = self._target(node, in_place)
        inputs = [delta, target, *([] if cached is None else [cached])]
        names = (SUM, MODEL) if steps else (SUM,)
        kernel = _kernel(scale, steps=steps, probes=not in_place)
        self._advance(kernel, names, inputs, in_place=in_place, delta=delta, base=base, scratch=1)
        self._store(node, target, in_place, norm)
        if not in_place:
            self._measure_bounds(caches=False)
        if not steps:
            return HELD
        self._t += 1
        return APPLIED

    def _fits(self, node: int, norm: float, scale: float) -> bool:
        """Whether the update provably keeps every array below ``IN_PLACE_LIMIT``; if so, record
        the new bounds (``norm`` bounds ``|delta|``, each cache's bound ``|G[k]|``)."""
        s = self._bounds[SUM] + self._cache_bounds.get(node, 0.0) + norm
        new = {SUM: s, "w": self._bounds["w"] + scale * s}
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self, *, caches: bool = True) -> None:
        """Exact maxima of |S| and |w| (and of each cache): where the running bounds start."""
        self._bounds = {SUM: max_abs(self._acc[SUM]), "w": max_abs(self._floats())}
        if caches:
            self._measure_cache_bounds()

    def _rule_state(self) -> dict[str, Any]:
        return {**self._cache_state(), "steps": self._t}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._load_cache_state(state)
        self._t = int(state["steps"])
        self._measure_bounds()


def _kernel(scale: float, *, steps: bool, probes: bool) -> Callable[..., float]:
    """``S - G[k] + delta``, the new ``G[k]``, and when ``steps`` ``w - (lr_t / n) * S``, on one
    chunk. Outputs may be the inputs themselves (in place): every input value is read before its
    output is written."""

    def kernel(ns, s, *rest) -> float:
        if not steps:  # warming up: S and G[k] only
            d, nc, *cached, _ = rest
            cache_chunk(ns, s, d, nc, cached)
            return probe(ns) if probes else 0.0
        out, w, d, nc, *cached, tmp = rest
        cache_chunk(ns, s, d, nc, cached)
        np.multiply(ns, scale, out=tmp)
        np.subtract(w, tmp, out=out)  # w - (lr_t / n) * S
        return probe(out) if probes else 0.0  # S reaches w through a finite factor

    return kernel
