"""Trend-Smooth (Cui, Guo, Fan, Lan, Cheng, IEEE Access 7:156848, 2019; a reconstruction).

The paper shrinks the learning rate of the coordinates whose step opposes the parameter trend;
ALGORITHMS.md ("Trend-Smooth") fixes this reconstruction of the rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    IN_PLACE_LIMIT,
    Aggregator,
    Arrays,
    ClientUpdate,
    Rejected,
    check_fraction,
    check_non_negative,
    max_abs,
    probe,
    run_chunked,
    squared_norm,
)
from fl_async.aggregators.staleness import StalenessFn

BASES = ("sgd", "momentum", "adam")


class TrendSmooth(Aggregator):
    """A base optimizer step ``d`` on ``g = s(tau) * delta``, shrunk where it opposes the trend.

    ``d_i <- shrink * d_i`` where ``d_i * T_i < 0``; ``w <- w + d``;
    ``T <- trend_decay * T + (1 - trend_decay) * d``. Bases: ``sgd`` (``d = -lr * g``),
    ``momentum`` (``m <- beta * m + g``; ``d = -lr * m``) and ``adam`` (bias-corrected).
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
        if base not in BASES:
            raise ValueError(f"base must be one of {list(BASES)}, got {base!r}")
        self.base = base
        self.lr = check_non_negative("lr", lr)
        self.beta = check_fraction("beta", beta, low=0.0, high=1.0, high_open=True)
        self.beta1 = check_fraction("beta1", beta1, low=0.0, high=1.0, high_open=True)
        self.beta2 = check_fraction("beta2", beta2, low=0.0, high=1.0, high_open=True)
        if check_non_negative("eps", eps) == 0:
            raise ValueError("eps must be > 0, got 0")
        self.eps = float(eps)
        self.trend_decay = check_fraction(
            "trend_decay", trend_decay, low=0.0, high=1.0, high_open=False
        )
        self.shrink = check_fraction("shrink", shrink, low=0.0, high=1.0, high_open=False)

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
        self._trend = self._zeros()
        self._m = self._zeros() if self.base != "sgd" else None
        self._q = self._zeros() if self.base == "adam" else None
        self._t = 0
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        t = self._t + 1
        size = squared_norm(delta)  # ||delta||^2: bounds it, and checks it
        if not math.isfinite(size):
            raise Rejected("non-finite")
        if self._fits(math.sqrt(size) * weight, t):
            # The step provably stays finite: update every array in place, in one pass.
            lists = [self._floats(), self._trend, self._floats(), self._trend, delta]
            run_chunked(self._kernel(weight, t, probes=False), *lists, *self._moments(), scratch=4)
            self._t = t
            return True
        # Too close to overflow to prove it finite: compute into scratch, check, then swap.
        new_trend, new_m, new_q = self._scratch(3)
        moments = self._moments(new_m, new_q)
        lists = [self._next, new_trend, self._floats(), self._trend, delta]
        total = run_chunked(self._kernel(weight, t, probes=True), *lists, *moments, scratch=4)
        self._require_finite(total, [self._next, new_trend, *moments[::2]], delta, base)
        self._trend, self._pool[0] = new_trend, self._trend
        if self._m is not None:
            self._m, self._pool[1] = new_m, self._m
        if self._q is not None:
            self._q, self._pool[2] = new_q, self._q
        self._t = t
        self._swap_next()
        self._measure_bounds()
        return True

    def _moments(self, new_m: Arrays | None = None, new_q: Arrays | None = None) -> list[Arrays]:
        """(new, old) pairs of the base optimizer's state; new is old when updating in place."""
        m = [new_m if new_m is not None else self._m, self._m]
        q = [new_q if new_q is not None else self._q, self._q]
        return {"sgd": [], "momentum": m, "adam": m + q}[self.base]

    def _kernel(self, weight: float, t: int, *, probes: bool):
        """The rule on one chunk. Outputs may be the inputs themselves (in place): every input
        value is read before its output is written."""

        def kernel(out, nt, w, tr, d, *rest) -> float:
            *moment, d_step, g, factor, tmp = rest
            if weight != 1.0:
                np.multiply(d, weight, out=g)  # g = s(tau) * delta
                d = g
            x, scale = self._base_direction(d, d_step, moment, t, scratch=tmp)  # d = scale * x
            # Shrink where d * T < 0: scale <= 0, so where x * T > 0. Masked ufuncs (where=,
            # putmask) are about 50x slower than multiplying by a factor of scale or
            # scale * shrink, which also folds the base step's scale in.
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
        ``IN_PLACE_LIMIT``; if so, take it and record the new bounds."""
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
        if not all(value < IN_PLACE_LIMIT for value in new.values()):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self) -> None:
        """Exact maxima of |w|, |T|, |m|, |q|: the start of the bounds ``_fits`` keeps."""

        self._bounds = {
            "w": max_abs(self._floats()),
            "T": max_abs(self._trend),
            "m": max_abs(self._m),
            "q": max_abs(self._q),
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
        return {
            "trend": self._copy_arrays(self._trend),
            "m": None if self._m is None else self._copy_arrays(self._m),
            "q": None if self._q is None else self._copy_arrays(self._q),
            "t": self._t,
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        if (state["m"] is None) != (self.base == "sgd") or (state["q"] is None) != (
            self.base != "adam"
        ):
            raise ValueError(f"state_dict does not match base={self.base!r}")
        self._trend = self._copy_arrays(state["trend"])
        self._m = None if state["m"] is None else self._copy_arrays(state["m"])
        self._q = None if state["q"] is None else self._copy_arrays(state["q"])
        self._t = int(state["t"])
        self._measure_bounds()
