"""FedAsync in plain numpy (docs/algorithms.md, FedAsync):
``a = alpha s(tau)``; ``w <- (1 - a) w + a (w_b - delta)``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import POLYNOMIAL, State, copy, weight_of
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model; FedAsync keeps nothing else."""
    return {"w": copy(params)}


def update(
    state: State,
    u: ClientUpdate,
    *,
    alpha: float = 0.6,
    staleness: StalenessFn = POLYNOMIAL,
) -> tuple[State, str]:
    """One update: ``(1 - a) w + ((w_b - delta) a)``, the node's model mixed in."""
    a = alpha * weight_of(staleness, u.staleness)
    w = [(1 - a) * w + (b - d) * a for w, b, d in zip(state["w"], u.base, u.delta, strict=True)]
    return {"w": w}, "applied"
