"""CA2FL in plain numpy (docs/algorithms.md, CA2FL).

``B <- B + delta - G0[k]`` (``G0[k]``: node ``k``'s cache at its first arrival in this
buffer); ``S <- S - G[k] + delta``; ``G[k] <- delta``; ``m <- m + 1``. When ``m = M``:
``w <- w - lr (h + B / M)``; then ``h <- S / n``, ``B <- 0``, ``m <- 0``, ``G0 <- {}``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import State, copy, zeros
from fl_async.aggregators.reference.gsgm import cache_update
from fl_async.aggregators.reference.gsgm import forget as forget_cached
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model, ``S = h = B = 0``, empty ``G`` and ``G0``, ``m = 0``."""
    w = copy(params)
    return {"w": w, "S": zeros(w), "h": zeros(w), "B": zeros(w), "G": {}, "G0": {}, "m": 0}


def update(
    state: State,
    u: ClientUpdate,
    *,
    buffer_size: int = 10,
    lr: float = 1.0,
    num_nodes: int | None = None,
) -> tuple[State, str]:
    """One update: held, or the ``M``-th, which steps."""
    node, delta = u.node_id, list(u.delta)
    cached = state["G"].get(node, zeros(delta))
    start = state["G0"].get(node, cached)  # G0[k]: recorded at the node's first arrival
    B = [b + d - g0 for b, d, g0 in zip(state["B"], delta, start, strict=True)]
    S, G = cache_update(state, node, delta)
    new = {**state, "S": S, "G": G, "G0": {**state["G0"], node: start}, "B": B}
    new["m"] = state["m"] + 1
    if new["m"] < buffer_size:
        return new, "held"
    n = len(G) if num_nodes is None else max(num_nodes, len(G))
    new["w"] = [
        w - lr * (h + b / buffer_size) for w, h, b in zip(state["w"], state["h"], B, strict=True)
    ]
    new["h"] = [s / n for s in S]
    return {**new, "B": zeros(B), "G0": {}, "m": 0}, "stepped"


def forget(state: State, node: int) -> State:
    """As GSGM's, and ``G0[k]`` dropped: what the node added to ``B`` and ``h`` stays."""
    new = forget_cached(state, node)
    return {**new, "G0": {k: g for k, g in state["G0"].items() if k != node}}
