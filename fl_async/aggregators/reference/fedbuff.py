"""FedBuff in plain numpy (docs/algorithms.md, FedBuff; Robust combination of a buffer).

``B <- B + s(tau) delta``; ``c <- c + 1``; when ``c = K``: ``m <- beta m + B / K`` (the shared
``Momentum``; ``beta = 0``: no momentum), ``w <- w - lr m``, ``B <- 0``, ``c <- 0``. With
``combine`` ``"median"`` or ``"trimmed-mean"`` the ``K`` weighted updates are held and their
coordinate-wise combination replaces ``B / K``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.optimizers import Momentum
from fl_async.aggregators.reference import POLYNOMIAL, State, copy, weight_of, zeros
from fl_async.aggregators.robust import MEAN, TRIM, combine_reference
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate


def init(params: Sequence[np.ndarray], *, server_momentum: float = 0.0) -> State:
    """The model, an empty buffer (``B``, or the held ``items``) and, when ``beta > 0``, the
    momentum's state ``m``."""
    state = {"w": copy(params), "B": zeros(params), "items": [], "c": 0}
    if server_momentum > 0:
        state["m"] = Momentum(beta=server_momentum).init(params)["m"]
    return state


def update(
    state: State,
    u: ClientUpdate,
    *,
    buffer_size: int = 10,
    lr: float = 1.0,
    server_momentum: float = 0.0,
    staleness: StalenessFn = POLYNOMIAL,
    combine: str = MEAN,
    trim: float = TRIM,
) -> tuple[State, str]:
    """One update: held, or the ``K``-th, which steps."""
    weight = weight_of(staleness, u.staleness)
    new = {**state, "c": state["c"] + 1}
    if combine == MEAN:
        new["B"] = [b + weight * d for b, d in zip(state["B"], u.delta, strict=True)]
    else:
        new["items"] = [*state["items"], [weight * d for d in u.delta]]
    if new["c"] < buffer_size:
        return new, "held"
    if combine == MEAN:
        g = [b / buffer_size for b in new["B"]]  # a division, not a product with 1 / K
    else:
        g = combine_reference(new["items"], combine, trim)
    if server_momentum > 0:
        momentum = Momentum(beta=server_momentum)
        step, moments = momentum.update({"m": state["m"], "t": 0}, g, lr=lr)
        new["m"] = moments["m"]
    else:
        step = [lr * x for x in g]
    new["w"] = [w - s for w, s in zip(state["w"], step, strict=True)]
    return {**new, "B": zeros(new["B"]), "items": [], "c": 0}, "stepped"
