"""Trend-Smooth (Cui, Guo, Fan, Lan, Cheng, IEEE Access 7:156848, 2019; a reconstruction).

The paper shrinks the learning rate of the coordinates whose step opposes the parameter trend;
ALGORITHMS.md ("Trend-Smooth") fixes this reconstruction of the rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    Aggregator,
    Arrays,
    ClientUpdate,
    check_fraction,
    check_non_negative,
    probe,
    run_chunked,
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

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        new_trend, new_m, new_q = self._scratch(3)
        t = self._t + 1
        moments = {
            "sgd": [],
            "momentum": [new_m, self._m],
            "adam": [new_m, self._m, new_q, self._q],
        }
        lists = [self._next, new_trend, self._trend, self._floats(), delta]

        def kernel(out, nt, tr, w, d, *rest) -> float:
            *moment, d_step, g = rest
            if weight != 1.0:
                np.multiply(d, weight, out=g)  # g = s(tau) * delta
                d = g
            x, scale = self._base_direction(d, d_step, moment, t, scratch=out)  # d = scale * x
            # Shrink where d * T < 0: scale <= 0, so where x * T > 0. Masked ufuncs (where=,
            # putmask) are about 50x slower than multiplying by a factor of scale or
            # scale * shrink, which also folds the base step's scale in.
            np.multiply(x, tr, out=nt)
            np.greater(nt, 0.0, out=nt, casting="unsafe")  # 1.0 where the step opposes the trend
            np.multiply(nt, scale * (self.shrink - 1.0), out=nt)
            np.add(nt, scale, out=nt)
            np.multiply(x, nt, out=d_step)  # d, shrunk
            np.add(w, d_step, out=out)  # w + d
            np.multiply(tr, self.trend_decay, out=nt)
            np.multiply(d_step, 1.0 - self.trend_decay, out=d_step)
            np.add(nt, d_step, out=nt)  # T = decay * T + (1 - decay) * d
            # m reaches w through d; T, and adam's q (inside a division), do not: probe them
            return probe(out) + probe(nt) + (probe(moment[2]) if self.base == "adam" else 0.0)

        total = run_chunked(kernel, *lists, *moments[self.base], scratch=2)
        held = moments[self.base][::2]
        self._require_finite(total, [self._next, new_trend, *held], delta, base)
        self._trend, self._pool[0] = new_trend, self._trend
        if self._m is not None:
            self._m, self._pool[1] = new_m, self._m
        if self._q is not None:
            self._q, self._pool[2] = new_q, self._q
        self._t = t
        self._swap_next()
        return True

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
