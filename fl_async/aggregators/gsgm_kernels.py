"""GSGM's fused chunk kernels (docs/algorithms.md, GSGM): ``fl_async.aggregators.reference.gsgm``
states the same rules in plain numpy, and the tests hold them equal.

A kernel gets one chunk of every array: (new, old) pairs of the state, then the model pair, the
delta, the slot of the new ``G[k]``, the cached ``G[k]`` (for a node seen before) and scratch
chunks. Outputs may be the inputs themselves (in place): every input value is read before its
output is written. The server optimizer's arithmetic is the shared one
(``fl_async.aggregators.optimizers``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fl_async.aggregators.kernels import probe
from fl_async.aggregators.optimizers import Momentum, ServerOptimizer, descend_chunk

Kernel = Callable[..., float]


@dataclass(frozen=True)
class Step:
    """The scalars of one GSGM update."""

    weight: float
    """``s(tau)``."""
    n: int
    """Nodes cached after this update."""
    beta: float
    """The momentum of this update (``implicit``: ``beta_t``)."""
    t: int
    """Adam's step count after this update."""
    close: bool
    """``cycle``: this update closes the cycle."""

    def factors(self, rho: float) -> tuple[float, float]:
        """``g = a * delta + b * S``: ``(a, b) = (s(tau) (1 - rho), s(tau) rho / n)``."""
        return self.weight * (1.0 - rho), self.weight * rho / self.n


def cache_chunk(ns, s, d, nc, cached) -> None:
    """``S - G[k] + delta`` into ``ns``; the new ``G[k]`` (delta) into ``nc`` while delta is in
    cache. ``cached`` holds the old ``G[k]`` chunk, or nothing for a node new to the cache."""
    if cached:
        np.subtract(s, cached[0], out=ns)
        np.add(ns, d, out=ns)  # S - G[k] + delta
    else:
        np.add(s, d, out=ns)
    np.copyto(nc, d)


def momentum_kernel(*, lr: float, rho: float, step: Step, probes: bool) -> Kernel:
    """The momentum rule (``update``; ``implicit`` with its ``beta_t``) on one chunk, with or
    without probes: ``u = beta u + s(tau) (1 - rho) delta + s(tau) rho / n S`` as three terms
    (``g`` is never formed), then ``w - lr u``."""
    momentum = Momentum(beta=step.beta)
    a, b = step.factors(rho)

    def kernel(ns, s, nv, u, out, w, d, nc, *rest) -> float:
        *cached, tmp = rest
        cache_chunk(ns, s, d, nc, cached)
        terms = ((d, a), (ns, b))
        x = momentum.direction_chunk(new=(nv,), old=(u,), terms=terms, tmp=tmp, lr=lr)
        descend_chunk(out, w, x, tmp)
        return probe(out) if probes else 0.0  # S and u reach w through finite factors

    return kernel


def variant_kernel(
    *,
    optimizer: ServerOptimizer,
    lr: float,
    rho: float,
    step: Step,
    cycle: Momentum | None,
    pairs: int,
    probes: bool,
) -> Kernel:
    """``sgd``, ``adam`` and the ``cycle`` momentum on one chunk: ``g`` is formed first (in a
    scratch chunk), then the optimizer's step (``cycle``: SGD's, and at the close the cycle's
    momentum). ``pairs``: the (new, old) pairs between ``S`` and the model. Every output is
    probed."""
    a, b = step.factors(rho)

    def kernel(ns, s, *rest) -> float:
        state, (out, w, d, nc, *cached, g, tmp) = rest[: 2 * pairs], rest[2 * pairs :]
        cache_chunk(ns, s, d, nc, cached)
        np.multiply(d, a, out=g)
        np.multiply(ns, b, out=tmp)
        np.add(g, tmp, out=g)  # g = s(tau) (1 - rho) delta + s(tau) rho / n S
        moments = state[2:] if cycle is not None else state
        x = optimizer.direction_chunk(
            new=moments[0::2], old=moments[1::2], terms=((g, 1.0),), tmp=tmp, lr=lr, t=step.t
        )
        descend_chunk(out, w, x, tmp)
        if cycle is not None:
            _cycle_chunk(out, g, tmp, state, cycle, lr=lr, close=step.close)
        if not probes:
            return 0.0
        return probe(ns) + probe(out) + sum(probe(a) for a in state[::2])

    return kernel


def _cycle_chunk(out, g, tmp, state, cycle: Momentum, *, lr: float, close: bool) -> None:
    """``c = c + g``; when the cycle closes: ``w - lr beta u`` (the previous ``u``), ``u = beta
    u + c``, ``c = 0``."""
    ncy, cy, *momentum = state
    np.add(cy, g, out=ncy)
    if close:
        nu, u = momentum
        np.multiply(u, lr * cycle.beta, out=tmp)
        np.subtract(out, tmp, out=out)
        cycle.accumulate_chunk(new_m=nu, m=u, terms=((ncy, 1.0),), tmp=tmp)
        ncy.fill(0.0)
