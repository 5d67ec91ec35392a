"""FedCompass's group step in plain numpy (docs/algorithms.md, FedCompass).

Each update is held with its base version ``b_k = v - tau`` (a node's newer update replaces its
older one); ``flush`` steps over the held updates of ``nodes`` (all held ones when None):
``c_k = alpha s(v - b_k) / N``, ``a = c_1 delta_1``, ``a <- a + c_k delta_k`` in ascending node
id, ``w <- w - a``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from fl_async.aggregators.reference import POLYNOMIAL, State, copy, weight_of
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model, its version ``v`` and the held updates (node -> ``(b_k, delta_k)``)."""
    return {"w": copy(params), "v": 0, "held": {}}


def update(state: State, u: ClientUpdate) -> tuple[State, str]:
    """Hold ``u`` with its base version, replacing its node's earlier held update."""
    held = {**state["held"], u.node_id: (state["v"] - int(u.staleness), copy(u.delta))}
    return {**state, "held": held}, "held"


def flush(
    state: State,
    *,
    alpha: float = 0.9,
    num_nodes: int = 1,
    staleness: StalenessFn = POLYNOMIAL,
    nodes: Iterable[int] | None = None,
) -> State:
    """The step over the held updates of ``nodes`` (none held: no step)."""
    held = state["held"]
    chosen = sorted(held if nodes is None else [k for k in set(nodes) if k in held])
    if not chosen:
        return state
    v = state["v"]
    c = [alpha * weight_of(staleness, v - held[k][0]) / num_nodes for k in chosen]
    a = [c[0] * d for d in held[chosen[0]][1]]
    for k, c_k in zip(chosen[1:], c[1:], strict=True):
        a = [x + c_k * d for x, d in zip(a, held[k][1], strict=True)]
    w = [w_i - a_i for w_i, a_i in zip(state["w"], a, strict=True)]
    rest = {k: h for k, h in held.items() if k not in chosen}
    return {**state, "w": w, "v": v + 1, "held": rest}
