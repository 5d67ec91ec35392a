"""ASGD in plain numpy (docs/algorithms.md, ASGD): ``w <- w - lr s(tau) delta``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import CONSTANT, State, copy, weight_of
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model; ASGD keeps nothing else."""
    return {"w": copy(params)}


def update(
    state: State, u: ClientUpdate, *, lr: float = 1.0, staleness: StalenessFn = CONSTANT
) -> tuple[State, str]:
    """One update: ``w - c delta`` with the scalar ``c = lr s(tau)``."""
    c = lr * weight_of(staleness, u.staleness)
    return {"w": [w - c * d for w, d in zip(state["w"], u.delta, strict=True)]}, "applied"
