"""MIFA in plain numpy (docs/algorithms.md, MIFA).

``S <- S - G[k] + delta``; ``G[k] <- delta``; ``w <- w - lr_t S / n`` (``n = max(N, nodes
cached)``), evaluated as ``(S - G[k]) + delta`` and ``w - (lr_t / n) S``. ``warmup``: no step
until ``N`` nodes have reported.

``forget`` is GSGM's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.mifa import scheduled_lr
from fl_async.aggregators.reference import State, copy, zeros
from fl_async.aggregators.reference.gsgm import cache_update, forget

__all__ = ["forget", "init", "update"]
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model, ``S = 0``, an empty cache ``G`` and ``t = 0`` steps."""
    return {"w": copy(params), "S": zeros(params), "G": {}, "t": 0}


def update(
    state: State,
    u: ClientUpdate,
    *,
    lr: float = 1.0,
    num_nodes: int | None = None,
    warmup: bool = False,
    lr_schedule: str = "constant",
) -> tuple[State, str]:
    """One update: held while warming up, else a step."""
    S, G = cache_update(state, u.node_id, list(u.delta))
    n = len(G) if num_nodes is None else max(num_nodes, len(G))
    if warmup and num_nodes is not None and len(G) < num_nodes and state["t"] == 0:
        return {**state, "S": S, "G": G}, "held"
    lr_t = scheduled_lr(lr, lr_schedule, state["t"])
    w = [w_k - lr_t / n * s for w_k, s in zip(state["w"], S, strict=True)]
    return {"w": w, "S": S, "G": G, "t": state["t"] + 1}, "applied"
