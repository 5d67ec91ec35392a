"""Trend-Smooth (Cui, Guo, Fan, Lan, Cheng, IEEE Access 7:156848, 2019; a reconstruction).

The paper shrinks the learning rate of the coordinates whose step opposes the parameter trend;
docs/algorithms.md (Trend-Smooth) fixes this reconstruction of the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, max_abs, probe, within_limit
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, norm_bound
from fl_async.validation import check_choice, check_number

BASES = ("sgd", "momentum", "adam")
STATE = {"sgd": (MODEL, "T"), "momentum": (MODEL, "T", "m"), "adam": (MODEL, "T", "m", "q")}
"""The named state each base optimizer keeps, in the order the kernel takes it."""


def trend_smooth_reference(
    state: dict[str, Any],
    delta: Arrays,
    weight: float,
    *,
    lr: float,
    base: str = "sgd",
    beta: float = 0.9,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    trend_decay: float = 0.9,
    shrink: float = 0.5,
) -> dict[str, Any]:
    """One Trend-Smooth update as docs/algorithms.md (Trend-Smooth) writes it: the readable rule
    ``TrendSmooth``'s fast kernel is tested against. ``state`` holds ``w``, ``T`` (and ``m``,
    ``q`` as the base needs; lists of float32 arrays) and ``t``; the new state is returned. Its
    operation order is the equations', not the kernel's (which folds scale factors together), so
    the two agree to float32 rounding."""
    new: dict[str, Any] = {"t": state["t"] + 1}
    g = [weight * d for d in delta]
    if base == "sgd":
        steps = [-lr * x for x in g]
    elif base == "momentum":
        new["m"] = [beta * m + x for m, x in zip(state["m"], g, strict=True)]
        steps = [-lr * m for m in new["m"]]
    else:
        steps = _adam_step_reference(state, new, g, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
    # d_i <- shrink d_i where d_i T_i < 0
    steps = [np.where(d * T < 0, shrink * d, d) for d, T in zip(steps, state["T"], strict=True)]
    new["w"] = [w + d for w, d in zip(state["w"], steps, strict=True)]
    gamma = trend_decay
    new["T"] = [gamma * T + (1 - gamma) * d for T, d in zip(state["T"], steps, strict=True)]
    return new


def _adam_step_reference(
    state: dict[str, Any],
    new: dict[str, Any],
    g: Arrays,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
) -> Arrays:
    """Adam's bias-corrected step ``d`` on gradient ``g``; its new moments go into ``new``."""
    t = new["t"]
    new["m"] = [beta1 * m + (1 - beta1) * x for m, x in zip(state["m"], g, strict=True)]
    new["q"] = [beta2 * q + (1 - beta2) * x * x for q, x in zip(state["q"], g, strict=True)]
    c1, c2 = 1 - beta1**t, 1 - beta2**t  # bias corrections
    return [
        -lr * (m / c1) / (np.sqrt(q / c2) + eps) for m, q in zip(new["m"], new["q"], strict=True)
    ]


class TrendSmooth(Aggregator):
    """A base optimizer step ``d`` on ``g = s(tau) * delta``, shrunk where it opposes the trend.

    ``d_i <- shrink * d_i`` where ``d_i * T_i < 0``; ``w <- w + d``;
    ``T <- trend_decay * T + (1 - trend_decay) * d``. Bases: ``sgd`` (``d = -lr * g``),
    ``momentum`` (``m <- beta * m + g``; ``d = -lr * m``) and ``adam`` (bias-corrected).
    ``trend_smooth_reference`` states the same rule without the fast machinery.
    """

    name = "TrendSmooth"

    def __init__(
        self,
        *,
        lr: float = 1.0,
        base: str = "sgd",
        beta: float = 0.9,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        trend_decay: float = 0.9,
        shrink: float = 0.5,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.base = check_choice("base", base, BASES)
        self.lr = check_number("lr", lr, minimum=0)
        self.beta = check_number("beta", beta, minimum=0, maximum=1, max_open=True)
        self.beta1 = check_number("beta1", beta1, minimum=0, maximum=1, max_open=True)
        self.beta2 = check_number("beta2", beta2, minimum=0, maximum=1, max_open=True)
        self.eps = check_number("eps", eps, minimum=0, min_open=True)
        self.trend_decay = check_number("trend_decay", trend_decay, minimum=0, maximum=1)
        self.shrink = check_number("shrink", shrink, minimum=0, maximum=1)

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "base": self.base,
            "beta": self.beta,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "trend_decay": self.trend_decay,
            "shrink": self.shrink,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        for name in STATE[self.base][1:]:
            self._acc[name] = self._zeros()
        self._t = 0
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        t = self._t + 1
        g = norm_bound(delta)  # bounds |delta|, and rejects NaN/Inf
        in_place = g is not None and self._fits(g * weight, t)
        kernel = self._kernel(weight, t, probes=not in_place)
        self._advance(
            kernel, STATE[self.base], [delta], in_place=in_place, delta=delta, base=base, scratch=4
        )
        self._t = t
        if not in_place:
            self._measure_bounds()
        return APPLIED

    def _kernel(self, weight: float, t: int, *, probes: bool) -> Callable[..., float]:
        """The rule on one chunk, with or without probes. Outputs may be the inputs themselves
        (in place): every input value is read before its output is written."""

        def kernel(out, w, nt, tr, *rest) -> float:
            *moment, d, d_step, g, factor, tmp = rest
            if weight != 1.0:
                np.multiply(d, weight, out=g)  # g = s(tau) * delta
                d = g
            x, scale = self._base_direction(d, d_step, moment, t, scratch=tmp)  # d = scale x
            # Shrink where d * T < 0: scale <= 0, so where x * T > 0. Multiplying by a
            # factor of scale or scale * shrink is far faster than a masked ufunc (where=,
            # putmask; benchmarks/PERFORMANCE.md), and folds the base step's scale in.
            np.multiply(x, tr, out=factor)
            np.greater(factor, 0.0, out=factor, casting="unsafe")  # 1.0 where opposed
            np.multiply(factor, scale * (self.shrink - 1.0), out=factor)
            np.add(factor, scale, out=factor)
            np.multiply(x, factor, out=d_step)  # d, shrunk
            np.add(w, d_step, out=out)  # w + d
            np.multiply(tr, self.trend_decay, out=nt)
            np.multiply(d_step, 1.0 - self.trend_decay, out=d_step)
            np.add(nt, d_step, out=nt)  # T = decay * T + (1 - decay) * d
            if not probes:
                return 0.0
            # m reaches w through d; T, and adam's q (inside a division), do not: probe them
            return probe(out) + probe(nt) + (probe(moment[2]) if self.base == "adam" else 0.0)

        return kernel

    def _fits(self, g: float, t: int) -> bool:
        """Whether a step with ``|s(tau) delta| <= g`` provably keeps every array below
        ``IN_PLACE_LIMIT``; if so, record the new bounds."""
        b = self._bounds
        new = dict(b)
        if self.base == "sgd":
            step = self.lr * g
        elif self.base == "momentum":
            new["m"] = self.beta * b["m"] + g
            step = self.lr * new["m"]
        else:
            new["m"] = self.beta1 * b["m"] + (1.0 - self.beta1) * g
            new["q"] = self.beta2 * b["q"] + (1.0 - self.beta2) * g * g
            # the denominator sqrt(q) + eps * sqrt(c2) is at least eps * sqrt(c2)
            step = self.lr * new["m"] / ((1.0 - self.beta1**t) * self.eps)
        new["w"] = b["w"] + step
        new["T"] = self.trend_decay * b["T"] + (1.0 - self.trend_decay) * step
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self) -> None:
        """Exact maxima of |w|, |T|, |m|, |q|: the start of the bounds ``_fits`` keeps."""
        acc = self._acc
        self._bounds = {
            "w": max_abs(self._floats()),
            "T": max_abs(acc["T"]),
            "m": max_abs(acc.get("m")),
            "q": max_abs(acc.get("q")),
        }

    def _base_direction(
        self, g: np.ndarray, out: np.ndarray, moment: list[np.ndarray], t: int, scratch: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """The base optimizer's step for gradient ``g`` as ``(x, scale)``, ``d = scale * x``.

        ``moment`` holds (new, old) pairs: ``[m', m]`` for momentum, ``[m', m, q', q]`` for adam;
        ``x`` is ``g``, the new ``m``, or (adam) written into ``out``. ``scale <= 0``.
        """
        if self.base == "sgd":
            return g, -self.lr  # d = -lr * g
        new_m, m = moment[0], moment[1]
        if self.base == "momentum":
            np.multiply(m, self.beta, out=new_m)
            np.add(new_m, g, out=new_m)  # m = beta * m + g
            return new_m, -self.lr  # d = -lr * m
        new_q, q = moment[2], moment[3]
        np.multiply(m, self.beta1, out=new_m)
        np.multiply(g, 1.0 - self.beta1, out=out)
        np.add(new_m, out, out=new_m)  # m = beta1 * m + (1 - beta1) * g
        np.square(g, out=out)
        np.multiply(out, 1.0 - self.beta2, out=out)
        np.multiply(q, self.beta2, out=new_q)
        np.add(new_q, out, out=new_q)  # q = beta2 * q + (1 - beta2) * g * g
        # -lr (m / c1) / (sqrt(q / c2) + eps) = -lr sqrt(c2) / c1 * m / (sqrt(q) + eps sqrt(c2))
        root_c2 = math.sqrt(1.0 - self.beta2**t)
        np.sqrt(new_q, out=scratch)
        np.add(scratch, self.eps * root_c2, out=scratch)
        np.divide(new_m, scratch, out=out)
        return out, -self.lr * root_c2 / (1.0 - self.beta1**t)

    def _rule_state(self) -> dict[str, Any]:
        acc = self._acc
        return {
            "trend": self._copy_arrays(acc["T"]),
            "m": self._copy_arrays(acc["m"]) if "m" in acc else None,
            "q": self._copy_arrays(acc["q"]) if "q" in acc else None,
            "t": self._t,
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        stored = {"T": state["trend"], "m": state["m"], "q": state["q"]}
        if {k for k, v in stored.items() if v is not None} != set(STATE[self.base][1:]):
            raise ValueError(f"state_dict does not match base={self.base!r}")
        for name in STATE[self.base][1:]:
            self._acc[name] = self._copy_arrays(stored[name])
        self._t = int(state["t"])
        self._measure_bounds()
