"""Server optimizers: how a rule turns the gradient it formed into a step (docs/algorithms.md,
References and the shared server optimizers).

A rule forms a gradient ``g`` (GSGM its scheduled, partly averaged gradient, Trend-Smooth
``s(tau) delta``, FedBuff and FADAS the mean of their buffer) and steps ``w <- w - step``. The
optimizer that makes ``step`` out of ``g`` is shared: ``SGD``, ``Momentum``, ``Adam`` and
``AMSGrad``. As in Optax, each is a frozen set of hyperparameters with ``init(params)`` (its
state: zero moments and ``t = 0``) and ``update(state, g, lr=...) -> (step, state)`` over
explicit state; ``state_dict`` / ``load_state_dict`` copy that state.

``update`` is the plain rule on arrays of any floating dtype. A rule's fused kernel runs the same
float operations in the same order on one chunk (``direction_chunk``: ``step = scale * x``) and
proves a step finite with ``bound``; the tests hold ``update`` and the chunks equal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

Arrays = list[np.ndarray]
OptState = dict[str, Any]
"""An optimizer's state: a list of arrays per slot (``m``, ``q``, ``q_max``) and the count
``t`` of steps it has taken."""
Term = tuple[np.ndarray, float]
"""One chunk of a gradient term and the scalar it is multiplied by (1.0: added as it is)."""
Direction = tuple[np.ndarray, float]
"""``(x, scale)``: a step ``scale * x`` on one chunk."""


def _zeros(params: Sequence[np.ndarray]) -> Arrays:
    return [np.zeros_like(p) for p in params]


def _add_term(out: np.ndarray, term: Term, tmp: np.ndarray) -> None:
    """``out <- out + factor * x``; a factor of 1.0 is skipped (``1.0 * x == x`` exactly)."""
    x, factor = term
    if factor == 1.0:
        np.add(out, x, out=out)
        return
    np.multiply(x, factor, out=tmp)
    np.add(out, tmp, out=out)


class ServerOptimizer:
    """What every server optimizer shares: its slots, ``init`` and the state's copies."""

    slots: ClassVar[tuple[str, ...]] = ()
    """The model-shaped arrays of its state, by name."""

    def init(self, params: Sequence[np.ndarray]) -> OptState:
        """Zero arrays shaped like ``params`` for every slot, and ``t = 0``."""
        return {**{slot: _zeros(params) for slot in self.slots}, "t": 0}

    def state_dict(self, state: OptState) -> dict[str, Any]:
        """Copies of ``state`` (float32 arrays), for a checkpoint."""
        saved = {slot: [np.array(a, copy=True) for a in state[slot]] for slot in self.slots}
        return {**saved, "t": int(state["t"])}

    def load_state_dict(self, saved: dict[str, Any]) -> OptState:
        """The state ``state_dict()`` saved (float32 copies); refuses one without a slot."""
        missing = [slot for slot in (*self.slots, "t") if slot not in saved]
        if missing:
            raise ValueError(f"{type(self).__name__} state is missing {missing}")
        loaded = {
            slot: [np.array(a, dtype=np.float32, copy=True) for a in saved[slot]]
            for slot in self.slots
        }
        return {**loaded, "t": int(saved["t"])}


@dataclass(frozen=True)
class SGD(ServerOptimizer):
    """``step = lr * g``: no state but ``t``."""

    def update(self, state: OptState, g: Arrays, *, lr: float) -> tuple[Arrays, OptState]:
        """One step on gradient ``g``."""
        return [lr * x for x in g], {"t": state["t"] + 1}

    def direction_chunk(self, *, terms: Sequence[Term], lr: float, **_: Any) -> Direction:
        """``(x, scale)`` with ``step = scale * x`` on one chunk: ``x`` is ``g``."""
        return _single(terms), lr

    def bound(self, bounds: dict[str, float], g: float, *, lr: float, t: int = 0) -> float:
        """A bound on ``|step|`` given ``|g| <= g``."""
        return lr * g


@dataclass(frozen=True)
class Momentum(ServerOptimizer):
    """Heavy-ball momentum: ``m <- beta * m + g``; ``step = lr * m``.

    ``g`` may come as several terms, added in order: ``m <- ((beta * m) + g_1) + g_2`` (GSGM
    adds its two parts of ``g`` so, without forming ``g``).
    """

    beta: float
    slots: ClassVar[tuple[str, ...]] = ("m",)

    def update(self, state: OptState, *terms: Arrays, lr: float) -> tuple[Arrays, OptState]:
        """One step on the gradient ``sum(terms)``."""
        m = [self.beta * m_k for m_k in state["m"]]
        for term in terms:
            m = [a + x for a, x in zip(m, term, strict=True)]
        return [lr * m_k for m_k in m], {"m": m, "t": state["t"] + 1}

    def accumulate_chunk(
        self, *, new_m: np.ndarray, m: np.ndarray, terms: Sequence[Term], tmp: np.ndarray
    ) -> None:
        """``new_m = beta * m + sum(factor * x)`` on one chunk, the terms added in order."""
        np.multiply(m, self.beta, out=new_m)
        for term in terms:
            _add_term(new_m, term, tmp)

    def direction_chunk(
        self,
        *,
        new: Sequence[np.ndarray],
        old: Sequence[np.ndarray],
        terms: Sequence[Term],
        tmp: np.ndarray,
        lr: float,
        **_: Any,
    ) -> Direction:
        """``(x, scale)`` with ``step = scale * x`` on one chunk: ``x`` is the new ``m``."""
        self.accumulate_chunk(new_m=new[0], m=old[0], terms=terms, tmp=tmp)
        return new[0], lr

    def bound(self, bounds: dict[str, float], g: float, *, lr: float, t: int = 0) -> float:
        """Update ``bounds["m"]`` for ``|g| <= g``; return a bound on ``|step|``."""
        bounds["m"] = self.beta * bounds["m"] + g
        return lr * bounds["m"]


@dataclass(frozen=True)
class Adam(ServerOptimizer):
    """Adam with bias corrections: ``m <- beta1 m + (1 - beta1) g``; ``q <- beta2 q + (1 -
    beta2) g g``; ``t <- t + 1``; ``step = lr (m / c1) / (sqrt(q / c2) + eps)`` with
    ``c = 1 - beta^t``, evaluated as ``(lr sqrt(c2) / c1) * (m / (sqrt(q) + eps sqrt(c2)))``."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    slots: ClassVar[tuple[str, ...]] = ("m", "q")

    def update(self, state: OptState, g: Arrays, *, lr: float) -> tuple[Arrays, OptState]:
        """One step on gradient ``g``."""
        t = state["t"] + 1
        m, q = _moments(state, g, self.beta1, self.beta2)
        root_c2 = math.sqrt(1.0 - self.beta2**t)
        scale = lr * root_c2 / (1.0 - self.beta1**t)
        eps = self.eps * root_c2
        step = [scale * (m_k / (np.sqrt(q_k) + eps)) for m_k, q_k in zip(m, q, strict=True)]
        return step, {"m": m, "q": q, "t": t}

    def direction_chunk(
        self,
        *,
        new: Sequence[np.ndarray],
        old: Sequence[np.ndarray],
        terms: Sequence[Term],
        tmp: np.ndarray,
        lr: float,
        t: int,
    ) -> Direction:
        """``(x, scale)`` with ``step = scale * x`` on one chunk; ``new`` and ``old`` are the
        ``(m, q)`` chunks; ``x`` is written into ``tmp``."""
        nm, nq = new
        _moments_chunk(nm, nq, *old, _single(terms), tmp, self.beta1, self.beta2)
        root_c2 = math.sqrt(1.0 - self.beta2**t)
        np.sqrt(nq, out=tmp)
        np.add(tmp, self.eps * root_c2, out=tmp)
        np.divide(nm, tmp, out=tmp)
        return tmp, lr * root_c2 / (1.0 - self.beta1**t)

    def bound(self, bounds: dict[str, float], g: float, *, lr: float, t: int) -> float:
        """Update ``bounds["m"]``, ``bounds["q"]`` for ``|g| <= g``; return a bound on ``|step|``
        (the denominator ``sqrt(q) + eps sqrt(c2)`` is at least ``eps sqrt(c2)``)."""
        bounds["m"] = self.beta1 * bounds["m"] + (1.0 - self.beta1) * g
        bounds["q"] = self.beta2 * bounds["q"] + (1.0 - self.beta2) * g * g
        return lr * bounds["m"] / ((1.0 - self.beta1**t) * self.eps)


@dataclass(frozen=True)
class AMSGrad(ServerOptimizer):
    """Adam's moments with the largest second moment so far: ``q_max <- max(q_max, q)``;
    ``step = lr_c * m / (sqrt(q_max) / r + eps)``, with ``lr_c = lr / (1 - beta1^t)`` and
    ``r = sqrt(1 - beta2^t)`` under ``bias_correction`` (as FADAS's authors' code evaluates it),
    else ``lr_c = lr`` and ``r = 1`` (no division)."""

    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    bias_correction: bool = False
    slots: ClassVar[tuple[str, ...]] = ("m", "q", "q_max")

    def corrections(self, lr: float, t: int) -> tuple[float, float]:
        """``(lr_c, r)`` of step ``t``."""
        if not self.bias_correction:
            return lr, 1.0
        return lr / (1.0 - self.beta1**t), math.sqrt(1.0 - self.beta2**t)

    def update(self, state: OptState, g: Arrays, *, lr: float) -> tuple[Arrays, OptState]:
        """One step on gradient ``g``."""
        t = state["t"] + 1
        m, q = _moments(state, g, self.beta1, self.beta2)
        q_max = [np.maximum(a, b) for a, b in zip(state["q_max"], q, strict=True)]
        step_size, root_c2 = self.corrections(lr, t)
        step = [
            step_size * (m_k / (_divide(np.sqrt(v), root_c2) + self.eps))
            for m_k, v in zip(m, q_max, strict=True)
        ]
        return step, {"m": m, "q": q, "q_max": q_max, "t": t}

    def direction_chunk(
        self,
        *,
        new: Sequence[np.ndarray],
        old: Sequence[np.ndarray],
        terms: Sequence[Term],
        tmp: np.ndarray,
        lr: float,
        t: int,
    ) -> Direction:
        """``(x, scale)`` with ``step = scale * x`` on one chunk; ``new`` and ``old`` are the
        ``(m, q, q_max)`` chunks; ``x`` is written into ``tmp``."""
        nm, nq, nv = new
        m, q, v = old
        _moments_chunk(nm, nq, m, q, _single(terms), tmp, self.beta1, self.beta2)
        np.maximum(v, nq, out=nv)
        step_size, root_c2 = self.corrections(lr, t)
        np.sqrt(nv, out=tmp)
        if root_c2 != 1.0:
            np.divide(tmp, root_c2, out=tmp)
        np.add(tmp, self.eps, out=tmp)
        np.divide(nm, tmp, out=tmp)
        return tmp, step_size


def _single(terms: Sequence[Term]) -> np.ndarray:
    """The gradient chunk of a rule that forms ``g`` before its optimizer runs."""
    ((g, factor),) = terms
    if factor != 1.0:
        raise ValueError("this optimizer takes the gradient as one term with factor 1.0")
    return g


def descend_chunk(out: np.ndarray, w: np.ndarray, direction: Direction, tmp: np.ndarray) -> None:
    """``out = w - scale * x`` (``out`` may be ``w``); a scale of 1.0 is skipped (``1.0 * x ==
    x`` exactly)."""
    x, scale = direction
    if scale == 1.0:
        np.subtract(w, x, out=out)
        return
    np.multiply(x, scale, out=tmp)
    np.subtract(w, tmp, out=out)


def _divide(x: np.ndarray, r: float) -> np.ndarray:
    return x if r == 1.0 else x / r


def _moments(state: OptState, g: Arrays, beta1: float, beta2: float) -> tuple[Arrays, Arrays]:
    """Adam's new moments: ``(beta1 m) + ((1 - beta1) g)``, ``(beta2 q) + ((1 - beta2) (g g))``."""
    m = [beta1 * m_k + (1 - beta1) * x for m_k, x in zip(state["m"], g, strict=True)]
    q = [beta2 * q_k + (1 - beta2) * (x * x) for q_k, x in zip(state["q"], g, strict=True)]
    return m, q


def _moments_chunk(nm, nq, m, q, g, tmp, beta1: float, beta2: float) -> None:
    """``_moments`` on one chunk, into ``nm`` and ``nq``."""
    np.multiply(m, beta1, out=nm)
    np.multiply(g, 1.0 - beta1, out=tmp)
    np.add(nm, tmp, out=nm)  # m = beta1 m + (1 - beta1) g
    np.square(g, out=tmp)
    np.multiply(tmp, 1.0 - beta2, out=tmp)
    np.multiply(q, beta2, out=nq)
    np.add(nq, tmp, out=nq)  # q = beta2 q + (1 - beta2) g g
