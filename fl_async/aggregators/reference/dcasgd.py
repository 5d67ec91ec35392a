"""DC-ASGD in plain numpy (docs/algorithms.md, DC-ASGD).

``w <- w - lr s(tau) (delta + lam delta delta (w - w_b))``, ``w`` before the step. Adaptive:
``M <- m M + (1 - m) delta delta`` first, then ``lam_t = lam0 / sqrt(M + 1e-7)`` replaces
``lam``. Evaluated as ``c = ((w - w_b) delta) delta``, ``c lam`` (or ``c lam_t``), ``c + delta``,
``w - (lr s(tau)) c``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import CONSTANT, State, copy, weight_of, zeros
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray], *, adaptive: bool = False) -> State:
    """The model and, when ``adaptive``, the mean square ``M = 0``."""
    return {"w": copy(params), **({"M": zeros(params)} if adaptive else {})}


def update(
    state: State,
    u: ClientUpdate,
    *,
    lr: float = 1.0,
    lam: float = 0.04,
    adaptive: bool = False,
    lam0: float = 2.0,
    ms_decay: float = 0.95,
    staleness: StalenessFn = CONSTANT,
) -> tuple[State, str]:
    """One update."""
    weight = weight_of(staleness, u.staleness)
    new: State = {}
    delta = list(u.delta)
    if adaptive:  # M <- m M + (1 - m) delta^2; lam_t = lam0 / sqrt(M + 1e-7)
        new["M"] = [
            ms_decay * m + (1 - ms_decay) * (d * d) for m, d in zip(state["M"], delta, strict=True)
        ]
        lams = [lam0 / np.sqrt(m + 1e-7) for m in new["M"]]
    else:
        lams = [lam] * len(delta)
    new["w"] = [
        w - lr * weight * (d + (w - b) * d * d * lam_k)
        for w, b, d, lam_k in zip(state["w"], u.base, delta, lams, strict=True)
    ]
    return new, "applied"
