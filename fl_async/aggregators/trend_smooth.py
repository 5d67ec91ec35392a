"""Trend-Smooth (Cui, Guo, Fan, Lan, Cheng, IEEE Access 7:156848, 2019; a reconstruction).

The paper shrinks the learning rate of the coordinates whose step opposes the parameter trend;
docs/algorithms.md (Trend-Smooth) fixes this reconstruction of the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, max_abs, probe, within_limit
from fl_async.aggregators.optimizers import SGD, Adam, Momentum, ServerOptimizer
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, norm_bound
from fl_async.validation import check_choice, check_number

BASES = ("sgd", "momentum", "adam")
STATE = {"sgd": (MODEL, "T"), "momentum": (MODEL, "T", "m"), "adam": (MODEL, "T", "m", "q")}
"""The named state each base optimizer keeps, in the order the kernel takes it."""


class TrendSmooth(Aggregator):
    """A base optimizer step ``d`` on ``g = s(tau) * delta``, shrunk where it opposes the trend.

    ``d_i <- shrink * d_i`` where ``d_i * T_i < 0``; ``w <- w + d``;
    ``T <- trend_decay * T + (1 - trend_decay) * d``. Bases: ``sgd`` (``d = -lr * g``),
    ``momentum`` (``m <- beta * m + g``; ``d = -lr * m``) and ``adam`` (bias-corrected).
    The base step is the shared server optimizer's (``fl_async.aggregators.optimizers``);
    ``fl_async.aggregators.reference.trend_smooth`` states the rule without the fast machinery.
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
        optimizers: dict[str, ServerOptimizer] = {
            "sgd": SGD(),
            "momentum": Momentum(beta=self.beta),
            "adam": Adam(beta1=self.beta1, beta2=self.beta2, eps=self.eps),
        }
        self.optimizer = optimizers[self.base]
        """The base optimizer, whose step the trend mask shrinks."""

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
            kernel, STATE[self.base], [delta], in_place=in_place, delta=delta, base=base, scratch=3
        )
        self._t = t
        if not in_place:
            self._measure_bounds()
        return APPLIED

    def _kernel(self, weight: float, t: int, *, probes: bool) -> Callable[..., float]:
        """The rule on one chunk, with or without probes. Outputs may be the inputs themselves
        (in place): every input value is read before its output is written."""
        lr = self.lr

        def kernel(out, w, nt, tr, *rest) -> float:
            *moment, d, d_step, g, factor = rest
            if weight != 1.0:
                np.multiply(d, weight, out=g)  # g = s(tau) * delta
                d = g
            x, step = self.optimizer.direction_chunk(
                new=moment[0::2], old=moment[1::2], terms=((d, 1.0),), tmp=d_step, lr=lr, t=t
            )
            scale = -step  # d = scale x
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
        step = self.optimizer.bound(new, g, lr=self.lr, t=t)
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
