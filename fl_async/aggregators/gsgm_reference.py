"""GSGM's rule in plain numpy (docs/algorithms.md, GSGM): what ``GSGM``'s fast kernels are
tested against, bit for bit (the same float32 operations in the same order).

On an update from node ``k``: ``S <- S - G[k] + delta``; ``G[k] <- delta``; ``n`` = nodes cached;
``g = (1 - rho) delta + rho S / n``; ``u <- beta u + s(tau) g``; ``w <- w - lr u``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fl_async.aggregators.kernels import Arrays


def _cache_update(state: dict[str, Any], node: int, delta: Arrays) -> tuple[Arrays, dict, int]:
    """``S <- S - G[k] + delta`` (``G[k] = 0`` before node ``k``'s first update); ``G[k] <-
    delta``; return the new ``S``, ``G`` and ``n``, the number of nodes cached."""
    cached = state["G"].get(node, [np.zeros_like(d) for d in delta])
    S = [s - g + d for s, g, d in zip(state["S"], cached, delta, strict=True)]
    G = {**state["G"], node: [d.copy() for d in delta]}
    return S, G, len(G)


def gsgm_reference(
    state: dict[str, Any],
    node: int,
    delta: Arrays,
    weight: float,
    *,
    lr: float,
    momentum: float,
    average_weight: float,
) -> dict[str, Any]:
    """One GSGM update from node ``node``. ``state`` holds ``w``, ``S``, ``u`` (lists of float32
    arrays) and ``G`` (node id -> its cached pseudo-gradient); the new state is returned."""
    rho, beta = average_weight, momentum
    S, G, n = _cache_update(state, node, delta)
    # u <- beta u + s(tau) g, where g = (1 - rho) delta + rho S / n: s(tau) enters both terms
    u = [
        beta * u_k + weight * (1 - rho) * d + weight * rho / n * s
        for u_k, d, s in zip(state["u"], delta, S, strict=True)
    ]
    w = [w_k - lr * u_k for w_k, u_k in zip(state["w"], u, strict=True)]
    return {"w": w, "S": S, "u": u, "G": G}


def implicit_momentum_beta(momentum: float, staleness_sum: float, count: int) -> float:
    """``beta_t = max(0, beta - mu_t)``, ``mu_t = tau_bar / (1 + tau_bar)``, ``tau_bar`` the mean
    staleness of the ``count`` updates applied so far (this one included): the momentum that
    asynchrony implies (Mitliagkas et al. 2016) taken off the explicit one."""
    tau_bar = staleness_sum / count
    return max(0.0, momentum - tau_bar / (1.0 + tau_bar))


def gsgm_variant_reference(
    state: dict[str, Any],
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
) -> dict[str, Any]:
    """One GSGM update with any ``server_optimizer`` / ``momentum_rule``. ``state`` holds
    ``w``, ``S``, ``G`` and what the optimizer keeps: ``u`` (momentum), ``c`` and ``j`` (cycle:
    the cycle's sum and its number of updates), ``tau_sum`` and ``tau_count`` (implicit), ``m``,
    ``q`` and ``t`` (adam). ``staleness`` is read by ``implicit`` only. The new state is
    returned."""
    rho = average_weight
    S, G, n = _cache_update(state, node, delta)
    new = {**state, "S": S, "G": G}
    if server_optimizer == "momentum" and momentum_rule != "cycle":
        beta = momentum
        if momentum_rule == "implicit":
            new["tau_sum"], new["tau_count"] = state["tau_sum"] + staleness, state["tau_count"] + 1
            beta = implicit_momentum_beta(momentum, new["tau_sum"], new["tau_count"])
        # gsgm_reference's three terms, with beta_t
        new["u"] = [
            beta * u_k + weight * (1 - rho) * d + weight * rho / n * s
            for u_k, d, s in zip(state["u"], delta, S, strict=True)
        ]
        new["w"] = [w_k - lr * u_k for w_k, u_k in zip(state["w"], new["u"], strict=True)]
        return new
    # the scheduled, partly averaged gradient g = s(tau) ((1 - rho) delta + rho S / n)
    g = [weight * (1 - rho) * d + weight * rho / n * s for d, s in zip(delta, S, strict=True)]
    if server_optimizer == "sgd":
        new["w"] = [w_k - lr * x for w_k, x in zip(state["w"], g, strict=True)]
    elif server_optimizer == "adam":
        _adam_reference(new, state, g, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
    else:
        _cycle_reference(new, state, g, n, lr=lr, momentum=momentum)
    return new


def _adam_reference(
    new: dict[str, Any], state: dict[str, Any], g: Arrays, *, lr, beta1, beta2, eps
) -> None:
    """Adam on ``g``, written into ``new``."""
    t = new["t"] = state["t"] + 1
    new["m"] = [beta1 * m + (1 - beta1) * x for m, x in zip(state["m"], g, strict=True)]
    new["q"] = [beta2 * q + (1 - beta2) * (x * x) for q, x in zip(state["q"], g, strict=True)]
    # lr (m / c1) / (sqrt(q / c2) + eps) = lr sqrt(c2) / c1 * m / (sqrt(q) + eps sqrt(c2))
    root_c2 = math.sqrt(1 - beta2**t)
    scale = lr * root_c2 / (1 - beta1**t)
    new["w"] = [
        w_k - scale * (m / (np.sqrt(q) + eps * root_c2))
        for w_k, m, q in zip(state["w"], new["m"], new["q"], strict=True)
    ]


def _cycle_reference(
    new: dict[str, Any], state: dict[str, Any], g: Arrays, n: int, *, lr, momentum
) -> None:
    """Momentum once per cycle of ``n`` updates, in FedAvgM's order, written into ``new``."""
    new["c"] = [c + x for c, x in zip(state["c"], g, strict=True)]
    new["w"] = [w_k - lr * x for w_k, x in zip(state["w"], g, strict=True)]
    new["j"] = state["j"] + 1
    if new["j"] >= n:  # the cycle is complete: w <- w - lr beta u; u <- beta u + c; c <- 0
        beta = momentum
        new["w"] = [w_k - lr * beta * u for w_k, u in zip(new["w"], state["u"], strict=True)]
        new["u"] = [beta * u + c for u, c in zip(state["u"], new["c"], strict=True)]
        new["c"] = [np.zeros_like(c) for c in new["c"]]
        new["j"] = 0
