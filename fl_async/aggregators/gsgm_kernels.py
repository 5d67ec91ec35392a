"""GSGM's fused chunk kernels (docs/algorithms.md, GSGM): ``gsgm_reference`` and
``gsgm_variant_reference`` state the same rules in plain numpy, and the tests hold them equal.

A kernel gets one chunk of every array: (new, old) pairs of the state, then the model pair, the
delta, the slot of the new ``G[k]``, the cached ``G[k]`` (for a node seen before) and scratch
chunks. Outputs may be the inputs themselves (in place): every input value is read before its
output is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fl_async.aggregators.kernels import probe

Kernel = Callable[..., float]


def cache_chunk(ns, s, d, nc, cached) -> None:
    """``S - G[k] + delta`` into ``ns``; the new ``G[k]`` (delta) into ``nc`` while delta is in
    cache. ``cached`` holds the old ``G[k]`` chunk, or nothing for a node new to the cache."""
    if cached:
        np.subtract(s, cached[0], out=ns)
        np.add(ns, d, out=ns)  # S - G[k] + delta
    else:
        np.add(s, d, out=ns)
    np.copyto(nc, d)


def momentum_kernel(
    *, lr: float, rho: float, weight: float, n: int, beta: float, probes: bool
) -> Kernel:
    """The momentum rule (``update``; ``implicit`` with its ``beta_t``) on one chunk, with or
    without probes."""

    def kernel(ns, s, nv, u, out, w, d, nc, *rest) -> float:
        *cached, tmp = rest
        cache_chunk(ns, s, d, nc, cached)
        # u = beta * u + s(tau) * ((1 - rho) * delta + rho * S / n), as three terms
        np.multiply(u, beta, out=nv)
        np.multiply(d, weight * (1.0 - rho), out=tmp)
        np.add(nv, tmp, out=nv)
        np.multiply(ns, weight * rho / n, out=tmp)
        np.add(nv, tmp, out=nv)
        if lr == 1.0:  # 1.0 * u == u exactly: skip a pass
            np.subtract(w, nv, out=out)
        else:
            np.multiply(nv, lr, out=tmp)
            np.subtract(w, tmp, out=out)  # w - lr * u
        return probe(out) if probes else 0.0  # S and u reach w through finite factors

    return kernel


def variant_kernel(
    *,
    optimizer: str,
    lr: float,
    rho: float,
    weight: float,
    n: int,
    beta: float,
    adam: tuple[float, float, float, int],
    close: bool,
    pairs: int,
    probes: bool,
) -> Kernel:
    """``sgd``, ``adam`` and the ``cycle`` momentum on one chunk: ``g`` is formed first (in a
    scratch chunk), then the optimizer's step. ``adam`` is (beta1, beta2, eps, t); ``pairs``
    the (new, old) pairs between ``S`` and the model. Every output is probed."""
    beta1, beta2, eps, t = adam
    root_c2 = math.sqrt(1.0 - beta2**t)
    scale = lr * root_c2 / (1.0 - beta1**t)

    def kernel(ns, s, *rest) -> float:
        state, (out, w, d, nc, *cached, g, tmp) = rest[: 2 * pairs], rest[2 * pairs :]
        cache_chunk(ns, s, d, nc, cached)
        np.multiply(d, weight * (1.0 - rho), out=g)
        np.multiply(ns, weight * rho / n, out=tmp)
        np.add(g, tmp, out=g)  # g = s(tau) (1 - rho) delta + s(tau) rho / n S
        if optimizer == "adam":
            _adam_chunk(out, w, g, tmp, state, beta1, beta2, eps * root_c2, scale)
        elif lr == 1.0:
            np.subtract(w, g, out=out)
        else:
            np.multiply(g, lr, out=tmp)
            np.subtract(w, tmp, out=out)  # w - lr g
        if optimizer == "momentum":  # cycle
            _cycle_chunk(out, g, tmp, state, lr, beta, close)
        if not probes:
            return 0.0
        return probe(ns) + probe(out) + sum(probe(a) for a in state[::2])

    return kernel


def _adam_chunk(out, w, g, tmp, state, beta1, beta2, eps_root_c2, scale) -> None:
    """Adam's moments of ``g`` and ``w - lr sqrt(c2) / c1 * m / (sqrt(q) + eps sqrt(c2))``."""
    nm, m, nq, q = state
    np.multiply(m, beta1, out=nm)
    np.multiply(g, 1.0 - beta1, out=tmp)
    np.add(nm, tmp, out=nm)  # m = beta1 m + (1 - beta1) g
    np.square(g, out=tmp)
    np.multiply(tmp, 1.0 - beta2, out=tmp)
    np.multiply(q, beta2, out=nq)
    np.add(nq, tmp, out=nq)  # q = beta2 q + (1 - beta2) g g
    np.sqrt(nq, out=tmp)
    np.add(tmp, eps_root_c2, out=tmp)
    np.divide(nm, tmp, out=tmp)
    np.multiply(tmp, scale, out=tmp)
    np.subtract(w, tmp, out=out)


def _cycle_chunk(out, g, tmp, state, lr, beta, close) -> None:
    """``c = c + g``; when the cycle closes: ``w - lr beta u`` (the previous ``u``), ``u = beta
    u + c``, ``c = 0``."""
    ncy, cy, *momentum = state
    np.add(cy, g, out=ncy)
    if close:
        nu, u = momentum
        np.multiply(u, lr * beta, out=tmp)
        np.subtract(out, tmp, out=out)
        np.multiply(u, beta, out=nu)
        np.add(nu, ncy, out=nu)
        ncy.fill(0.0)
