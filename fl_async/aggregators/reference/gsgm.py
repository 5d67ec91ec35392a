"""GSGM in plain numpy (docs/algorithms.md, GSGM), with its variants.

On an update from node ``k``: ``S <- S - G[k] + delta`` (``G[k] = 0`` before its first update);
``G[k] <- delta``; ``n`` = nodes cached; the scheduled, partly averaged gradient is
``s(tau) ((1 - rho) delta + rho S / n)``, and the server optimizer (the shared ones) steps on it:

- ``momentum`` (``update``): ``u <- ((beta u) + (s(tau)(1 - rho)) delta) + (s(tau) rho / n) S``;
  ``w <- w - lr u``; ``implicit``: the same with ``beta_t = max(0, beta - tau_bar / (1 +
  tau_bar))``; ``cycle``: ``w <- w - lr g``; ``c <- c + g``; the update that closes a cycle of
  ``n`` updates also does ``w <- w - lr beta u``; ``u <- beta u + c``; ``c <- 0``;
- ``sgd``: ``w <- w - lr g``;
- ``adam``: ``w <- w - step``, Adam's step on ``g``.

``schedule="buffer"`` feeds this rule the plain mean of a node's held updates when its turn
comes (``step`` with their mean weight and staleness).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.gsgm import implicit_momentum_beta
from fl_async.aggregators.optimizers import SGD, Adam, Momentum
from fl_async.aggregators.reference import CONSTANT, State, copy, weight_of, zeros
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate

Arrays = list[np.ndarray]


def init(params: Sequence[np.ndarray]) -> State:
    """The model, ``S = 0``, an empty cache ``G``, and every variant's state at its start:
    ``u = 0``; the cycle's ``c = 0``, ``j = 0``; the staleness sum and count; Adam's ``m = q =
    0``, ``t = 0``."""
    w = copy(params)
    state = {"w": w, "S": zeros(w), "G": {}, "u": zeros(w), "c": zeros(w), "j": 0}
    return {**state, "tau_sum": 0.0, "tau_count": 0, "m": zeros(w), "q": zeros(w), "t": 0}


def cache_update(state: State, node: int, delta: Arrays) -> tuple[Arrays, dict]:
    """``S <- (S - G[k]) + delta`` (no subtraction for a node new to the cache); ``G[k] <-
    delta``; the new ``S`` and ``G``."""
    cached = state["G"].get(node)
    if cached is None:
        S = [s + d for s, d in zip(state["S"], delta, strict=True)]
    else:
        S = [s - g + d for s, g, d in zip(state["S"], cached, delta, strict=True)]
    return S, {**state["G"], node: copy(delta)}


def update(
    state: State,
    u: ClientUpdate,
    *,
    lr: float = 0.1,
    momentum: float = 0.9,
    average_weight: float = 0.5,
    server_optimizer: str = "momentum",
    momentum_rule: str = "update",
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    staleness: StalenessFn = CONSTANT,
) -> tuple[State, str]:
    """One update (``schedule="block"``)."""
    weight = weight_of(staleness, u.staleness)
    rules = {"server_optimizer": server_optimizer, "momentum_rule": momentum_rule}
    rules.update(beta1=beta1, beta2=beta2, eps=eps)
    hyper = {"lr": lr, "momentum": momentum, "average_weight": average_weight, **rules}
    return step(state, u.node_id, list(u.delta), weight, u.staleness, **hyper), "applied"


def step(
    state: State,
    node: int,
    delta: Arrays,
    weight: float,
    staleness: float,
    *,
    lr: float,
    momentum: float,
    average_weight: float,
    server_optimizer: str = "momentum",
    momentum_rule: str = "update",
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> State:
    """One GSGM update from ``node`` with weight ``s(tau)`` and staleness ``tau`` (read by
    ``implicit`` only)."""
    rho = average_weight
    S, G = cache_update(state, node, delta)
    n = len(G)
    new = {**state, "S": S, "G": G}
    a, b = weight * (1 - rho), weight * rho / n  # g = a delta + b S
    if server_optimizer == "momentum" and momentum_rule != "cycle":
        beta = momentum
        if momentum_rule == "implicit":
            new["tau_sum"], new["tau_count"] = state["tau_sum"] + staleness, state["tau_count"] + 1
            beta = implicit_momentum_beta(momentum, new["tau_sum"], new["tau_count"])
        terms = ([a * d for d in delta], [b * s for s in S])
        step_, moments = Momentum(beta=beta).update({"m": state["u"], "t": 0}, *terms, lr=lr)
        new["u"] = moments["m"]
        return _descend(new, step_)
    g = [a * d + b * s for d, s in zip(delta, S, strict=True)]
    if server_optimizer == "sgd":
        step_, _ = SGD().update({"t": 0}, g, lr=lr)
    elif server_optimizer == "adam":
        adam = Adam(beta1=beta1, beta2=beta2, eps=eps)
        step_, moments = adam.update({k: state[k] for k in ("m", "q", "t")}, g, lr=lr)
        new.update(moments)
    else:
        return _cycle(new, state, g, n, lr=lr, momentum=momentum)
    return _descend(new, step_)


def _descend(new: State, step_: Arrays) -> State:
    """``w <- w - step``."""
    return {**new, "w": [w - s for w, s in zip(new["w"], step_, strict=True)]}


def _cycle(new: State, state: State, g: Arrays, n: int, *, lr: float, momentum: float) -> State:
    """Momentum once per cycle of ``n`` updates, in FedAvgM's order."""
    new["c"] = [c + x for c, x in zip(state["c"], g, strict=True)]
    new["w"] = [w_k - lr * x for w_k, x in zip(state["w"], g, strict=True)]
    new["j"] = state["j"] + 1
    if new["j"] < n:
        return new
    # the cycle is complete: w <- w - lr beta u; u <- beta u + c; c <- 0
    new["w"] = [w_k - lr * momentum * u for w_k, u in zip(new["w"], state["u"], strict=True)]
    _, moments = Momentum(beta=momentum).update({"m": state["u"], "t": 0}, new["c"], lr=lr)
    return {**new, "u": moments["m"], "c": zeros(new["c"]), "j": 0}


def forget(state: State, node: int) -> State:
    """``S <- S - G[k]``; ``G[k]`` deleted (nothing when ``k`` has no cached gradient)."""
    if node not in state["G"]:
        return state
    S = [s - g for s, g in zip(state["S"], state["G"][node], strict=True)]
    return {**state, "S": S, "G": {k: g for k, g in state["G"].items() if k != node}}
