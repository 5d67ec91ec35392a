"""CA2FL: buffered asynchronous aggregation with cached update calibration (Wang, Cao, Wu, Chen,
Chen, ICLR 2024; docs/algorithms.md, CA2FL).

FedBuff's buffer, each update calibrated by its node's cached one: the buffer sums
``delta - G0[k]`` and the step adds back ``h = S / n``, the average cached update frozen when the
buffer began. ``fl_async.aggregators.reference.ca2fl`` states the rule in plain numpy; ``CA2FL``
runs each update as one fused chunk kernel into scratch, checked and then published (as FedBuff
does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from fl_async.aggregators.base import HELD, MODEL, STEPPED, Status
from fl_async.aggregators.cached import SUM, CachedAggregator
from fl_async.aggregators.gsgm_kernels import cache_chunk
from fl_async.aggregators.kernels import Arrays, probe
from fl_async.aggregators.updates import ClientUpdate, Rejected, norm_bound
from fl_async.validation import check_int, check_number

CALIBRATION = "h"
"""The average cached update frozen at the start of the buffer, among the accumulators."""
BUFFER = "B"
"""The buffer of calibrated updates."""


class CA2FL(CachedAggregator):
    """FedBuff with cached update calibration.

    On an update from node ``k``: ``B <- B + delta - G0[k]`` (``G0[k]``: node ``k``'s cached
    update when it first arrived in this buffer, 0 if it had none); ``S <- S - G[k] + delta``;
    ``G[k] <- delta``; ``m <- m + 1``. When ``m = buffer_size``: ``w <- w - lr * (h + B / M)``;
    then ``h <- S / n``, ``B <- 0``, ``m <- 0``. ``n = max(num_nodes, nodes cached)``
    (``num_nodes`` None: the nodes cached; the preset sets N). No staleness weight.
    """

    name = "CA2FL"
    tracks_bounds: ClassVar[bool] = False  # every step runs into scratch and is checked

    def __init__(
        self,
        *,
        buffer_size: int = 10,
        lr: float = 1.0,
        num_nodes: int | None = None,
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
        self.buffer_size = check_int("buffer_size", buffer_size, minimum=1)
        self.lr = check_number("lr", lr, minimum=0)
        self.num_nodes = check_int("num_nodes", num_nodes, minimum=1, allow_none=True)

    @property
    def count(self) -> int:
        """Updates held in the buffer since the last step."""
        return self._count

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "buffer_size": self.buffer_size,
            "lr": self.lr,
            "num_nodes": self.num_nodes,
            **super().hyperparameters(),
        }

    def forget(self, node_id: int) -> None:
        """Drop node ``node_id``'s cached update from ``S`` and its ``G0`` record; what it added
        to the buffer stays, and ``h`` keeps its share until the next step."""
        super().forget(node_id)
        start = self._starts.pop(node_id, None)
        if start is not None:
            self._free.append(start)

    def _init_state(self) -> None:
        self._reset_cache()
        self._acc[BUFFER] = self._zeros()
        self._acc[CALIBRATION] = self._zeros()
        self._count = 0
        self._starts: dict[int, Arrays | None] = {}  # G0[k] of the nodes seen in this buffer
        self._free: list[Arrays] = []  # slots of released G0 copies, reused

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        norm_bound(delta)  # rejects NaN/Inf before any state is touched
        node = update.node_id
        cached = self._cache.get(node)
        first = node not in self._starts
        start = cached if first else self._starts[node]
        slot = None
        if first and cached is not None:  # keep G0[k]: the cache is overwritten below
            slot = self._free.pop() if self._free else self._zeros()
        final = self._count + 1 == self.buffer_size
        target = self._target(node, in_place=False)
        inputs = [delta, target, *(a for a in (cached, start, slot) if a is not None)]
        names = (SUM, BUFFER, *((MODEL, CALIBRATION) if final else ()))
        n = len(self._cache) + (cached is None)
        n = n if self.num_nodes is None else max(self.num_nodes, n)
        parts = (cached is not None, start is not None, slot is not None)
        kernel = _kernel(self.lr, self.buffer_size, n, parts=parts, final=final)
        try:
            self._advance(kernel, names, inputs, delta=delta, base=base, scratch=1)
        except Rejected:
            if slot is not None:
                self._free.append(slot)
            raise
        self._store(node, target, in_place=False, norm=None)
        if first:
            self._starts[node] = slot
        return self._close_buffer() if final else self._hold()

    def _hold(self) -> Status:
        self._count += 1
        return HELD

    def _close_buffer(self) -> Status:
        """The step was taken: the buffer starts empty."""
        for b in self._acc[BUFFER]:
            b.fill(0.0)
        self._free.extend(s for s in self._starts.values() if s is not None)
        self._starts, self._count = {}, 0
        return STEPPED

    def _rule_state(self) -> dict[str, Any]:
        return {
            **self._cache_state(),
            "calibration": self._copy_arrays(self._acc[CALIBRATION]),
            "buffer": self._copy_arrays(self._acc[BUFFER]),
            "count": self._count,
            # G0 by node (sorted): a copy of its cache, or in "fresh" when it had none (G0 = 0)
            "starts": {
                k: self._copy_arrays(s) for k, s in sorted(self._starts.items()) if s is not None
            },
            "fresh": sorted(k for k, s in self._starts.items() if s is None),
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._load_cache_state(state)
        self._acc[CALIBRATION] = self._copy_arrays(state["calibration"])
        self._acc[BUFFER] = self._copy_arrays(state["buffer"])
        self._count = int(state["count"])
        self._starts = {int(k): None for k in state["fresh"]}
        self._starts.update((int(k), self._copy_arrays(s)) for k, s in state["starts"].items())
        self._free = []


def _kernel(
    lr: float, buffer_size: int, n: int, *, parts: tuple[bool, bool, bool], final: bool
) -> Callable[..., float]:
    """One CA2FL update on one chunk, into scratch. ``parts`` says which optional inputs follow
    the delta and the new ``G[k]``: the cached ``G[k]``, ``G0[k]``, and a slot to copy ``G[k]``
    into (the node's first arrival in this buffer)."""
    has_cached, has_start, saves = parts

    def kernel(ns, s, nb, b, *rest) -> float:
        if final:
            out, w, nh, h, *rest = rest
        d, nc, *rest, tmp = rest
        cached = [rest.pop(0)] if has_cached else []
        start = rest.pop(0) if has_start else None
        if saves:
            np.copyto(rest[0], cached[0])  # G0[k], copied before the cache is overwritten
        np.add(b, d, out=nb)
        if start is not None:
            np.subtract(nb, start, out=nb)  # B + delta - G0[k]
        cache_chunk(ns, s, d, nc, cached)
        if not final:
            return probe(ns) + probe(nb)
        np.divide(nb, buffer_size, out=tmp)
        np.add(h, tmp, out=tmp)  # h + B / M
        if lr == 1.0:  # 1.0 * x == x exactly: skip a pass
            np.subtract(w, tmp, out=out)
        else:
            np.multiply(tmp, lr, out=tmp)
            np.subtract(w, tmp, out=out)  # w - lr (h + B / M)
        np.divide(ns, n, out=nh)  # h = S / n, for the next buffer
        return probe(ns) + probe(nb) + probe(out) + probe(nh)

    return kernel
