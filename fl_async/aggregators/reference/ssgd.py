"""SSGD in plain numpy (docs/algorithms.md, SSGD; Robust combination of a buffer).

Each update is held; ``flush`` steps ``w <- w - lr sum_k (n_k / sum_j n_j) delta_k`` over the
held updates in ascending node id (weight ``1 / K`` each when every ``n_k`` is 0), or with their
coordinate-wise median or trimmed mean (``combine``, unweighted).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import State, copy
from fl_async.aggregators.robust import MEAN, TRIM, combine_reference
from fl_async.aggregators.updates import ClientUpdate, Rejected

Held = dict[int, tuple[int, list[np.ndarray]]]
"""node id -> (its ``n_k``, its delta)."""


def init(params: Sequence[np.ndarray]) -> State:
    """The model, its version ``v`` and the held updates."""
    return {"w": copy(params), "v": 0, "held": {}}


def update(state: State, u: ClientUpdate) -> tuple[State, str]:
    """Hold one update of the step being filled (``tau > 0``: too stale; a second update of a
    node: a duplicate)."""
    if u.staleness > 0:
        raise Rejected("too-stale")
    return {**state, "held": hold(state["held"], u)}, "held"


def hold(held: Held, u: ClientUpdate) -> Held:
    """``held`` with ``u``'s delta and ``n_k`` added."""
    if u.node_id in held:
        raise Rejected("duplicate")
    return {**held, u.node_id: (int(u.num_examples), copy(u.delta))}


def flush(state: State, *, lr: float = 1.0, combine: str = MEAN, trim: float = TRIM) -> State:
    """The step over the held updates (none held: no step)."""
    if not state["held"]:
        return state
    w = step(state["w"], state["held"], lr=lr, combine=combine, trim=trim)
    return {**state, "w": w, "v": state["v"] + 1, "held": {}}


def step(
    w: list[np.ndarray], held: Held, *, lr: float, combine: str, trim: float
) -> list[np.ndarray]:
    """``w - lr a``, ``a`` the held updates' weighted mean (shares ``p_k`` in double precision,
    ``a = p_1 delta_1``, then ``a <- a + p_k delta_k``) or their robust combination."""
    order = sorted(held)
    deltas = [held[k][1] for k in order]
    if combine != MEAN:
        a = combine_reference(deltas, combine, trim)
    else:
        examples = sum(held[k][0] for k in order)
        shares = [held[k][0] / examples if examples > 0 else 1.0 / len(order) for k in order]
        a = [shares[0] * d for d in deltas[0]]
        for delta, share in zip(deltas[1:], shares[1:], strict=True):
            a = [x + share * d for x, d in zip(a, delta, strict=True)]
    return [w_k - lr * a_k for w_k, a_k in zip(w, a, strict=True)]
