"""Trend-Smooth in plain numpy (docs/algorithms.md, Trend-Smooth), in the equations' order.

1. ``g = s(tau) delta``; 2. the base optimizer's step ``d``: ``sgd`` ``d = -lr g``;
``momentum`` ``m <- beta m + g``, ``d = -lr m``; ``adam`` ``d = -lr (m / c1) / (sqrt(q / c2) +
eps)``; 3. ``d_i <- shrink d_i`` where ``d_i T_i < 0``; 4. ``w <- w + d``; ``T <- gamma T + (1 -
gamma) d``. The kernel folds scale factors together (docs/algorithms.md, "Evaluated as"), so the
two agree to float32 rounding, not to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import CONSTANT, State, copy, weight_of, zeros
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate

Arrays = list[np.ndarray]


def init(params: Sequence[np.ndarray]) -> State:
    """The model, the trend ``T = 0``, the moments ``m = q = 0`` and ``t = 0``."""
    w = copy(params)
    return {"w": w, "T": zeros(w), "m": zeros(w), "q": zeros(w), "t": 0}


def update(
    state: State,
    u: ClientUpdate,
    *,
    lr: float = 1.0,
    base: str = "sgd",
    beta: float = 0.9,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    trend_decay: float = 0.9,
    shrink: float = 0.5,
    staleness: StalenessFn = CONSTANT,
) -> tuple[State, str]:
    """One update."""
    new: State = {**state, "t": state["t"] + 1}
    g = [weight_of(staleness, u.staleness) * d for d in u.delta]
    if base == "sgd":
        steps = [-lr * x for x in g]
    elif base == "momentum":
        new["m"] = [beta * m + x for m, x in zip(state["m"], g, strict=True)]
        steps = [-lr * m for m in new["m"]]
    else:
        steps = _adam_step(state, new, g, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
    # d_i <- shrink d_i where d_i T_i < 0
    steps = [np.where(d * T < 0, shrink * d, d) for d, T in zip(steps, state["T"], strict=True)]
    new["w"] = [w + d for w, d in zip(state["w"], steps, strict=True)]
    gamma = trend_decay
    new["T"] = [gamma * T + (1 - gamma) * d for T, d in zip(state["T"], steps, strict=True)]
    return new, "applied"


def _adam_step(
    state: State, new: State, g: Arrays, *, lr: float, beta1: float, beta2: float, eps: float
) -> Arrays:
    """Adam's bias-corrected step ``d`` on gradient ``g``; its new moments go into ``new``."""
    t = new["t"]
    new["m"] = [beta1 * m + (1 - beta1) * x for m, x in zip(state["m"], g, strict=True)]
    new["q"] = [beta2 * q + (1 - beta2) * x * x for q, x in zip(state["q"], g, strict=True)]
    c1, c2 = 1 - beta1**t, 1 - beta2**t  # bias corrections
    return [
        -lr * (m / c1) / (np.sqrt(q / c2) + eps) for m, q in zip(new["m"], new["q"], strict=True)
    ]
