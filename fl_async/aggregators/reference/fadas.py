"""FADAS in plain numpy (docs/algorithms.md, FADAS).

``B <- B + delta``; ``c <- c + 1``; ``tau_max <- max(tau_max, tau)``. When ``c = M``: the shared
``AMSGrad`` steps on ``g = B / M`` at the delay-adaptive rate ``lr_t``; then ``B <- 0``,
``c <- 0``, ``tau_max <- 0``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.fadas import delay_adaptive_lr
from fl_async.aggregators.optimizers import AMSGrad
from fl_async.aggregators.reference import State, copy, zeros
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray]) -> State:
    """The model, ``B = 0``, ``c = tau_max = 0``, and AMSGrad's state (``m``, ``q``, ``q_max``,
    ``t``)."""
    w = copy(params)
    return {"w": w, "B": zeros(w), "c": 0, "tau_max": 0, **AMSGrad().init(w)}


def update(
    state: State,
    u: ClientUpdate,
    *,
    buffer_size: int = 5,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.99,
    eps: float = 1e-8,
    tau_c: int = 1,
    delay_rule: str = "inverse",
    bias_correction: bool = False,
) -> tuple[State, str]:
    """One update: held, or the ``M``-th, which steps."""
    B = [b + d for b, d in zip(state["B"], u.delta, strict=True)]
    new = {**state, "B": B, "c": state["c"] + 1, "tau_max": max(state["tau_max"], u.staleness)}
    if new["c"] < buffer_size:
        return new, "held"
    g = [b / buffer_size for b in B]  # a division, not a product with 1 / M
    lr_t = delay_adaptive_lr(lr, new["tau_max"], tau_c=tau_c, delay_rule=delay_rule)
    amsgrad = AMSGrad(beta1=beta1, beta2=beta2, eps=eps, bias_correction=bias_correction)
    moments = {k: state[k] for k in (*amsgrad.slots, "t")}
    step, moments = amsgrad.update(moments, g, lr=lr_t)
    w = [w - s for w, s in zip(state["w"], step, strict=True)]
    return {**new, **moments, "w": w, "B": zeros(B), "c": 0, "tau_max": 0}, "stepped"
