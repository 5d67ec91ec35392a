"""DC-ASGD: delay-compensated ASGD (Zheng et al. 2017; ALGORITHMS.md, "DC-ASGD")."""

from __future__ import annotations

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
    subtract_scaled,
)
from fl_async.aggregators.staleness import StalenessFn


class DCASGD(Aggregator):
    """``w <- w - lr * s(tau) * (delta + lam * delta * delta * (w - w_b))``, per coordinate.

    ``adaptive=True``: ``M <- ms_decay * M + (1 - ms_decay) * delta * delta`` and
    ``lam_t = lam0 / sqrt(M + 1e-7)`` replaces ``lam``.

    ``lam`` acts on the pseudo-gradient, which is about (local lr x local steps) times a
    gradient: the paper's ``lambda_grad`` corresponds to ``lam = lambda_grad / (local lr x local
    steps)``. The adaptive variant is scale-consistent and needs no such conversion.
    """

    name = "DCASGD"
    needs_base = True

    def __init__(
        self,
        *,
        lr: float = 1.0,
        lam: float = 0.04,
        adaptive: bool = False,
        lam0: float = 2.0,
        ms_decay: float = 0.95,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.lr = check_non_negative("lr", lr)
        self.lam = check_non_negative("lam", lam)
        if not isinstance(adaptive, bool):
            raise ValueError(f"adaptive must be True or False, got {adaptive!r}")
        self.adaptive = adaptive
        self.lam0 = check_non_negative("lam0", lam0)
        self.ms_decay = check_fraction("ms_decay", ms_decay, low=0.0, high=1.0, high_open=True)

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "lam": self.lam,
            "adaptive": self.adaptive,
            "lam0": self.lam0,
            "ms_decay": self.ms_decay,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        self._mean_square = self._zeros() if self.adaptive else None

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        (new_ms,) = self._scratch(1)
        adaptive = [] if self._mean_square is None else [new_ms, self._mean_square]
        scale = self.lr * weight

        def kernel(out, w, b, d, *rest) -> float:
            *ms, c = rest
            total = 0.0
            np.subtract(w, b, out=c)  # w - w_b
            np.multiply(c, d, out=c)
            np.multiply(c, d, out=c)
            if ms:
                nm, m = ms
                np.multiply(d, d, out=out)
                np.multiply(out, 1.0 - self.ms_decay, out=out)
                np.multiply(m, self.ms_decay, out=nm)
                np.add(nm, out, out=nm)  # M = m * M + (1 - m) * delta^2
                np.add(nm, 1e-7, out=out)
                np.sqrt(out, out=out)
                np.divide(self.lam0, out, out=out)  # lam_t = lam0 / sqrt(M + 1e-7)
                np.multiply(c, out, out=c)
                total += probe(nm)  # an infinite M would vanish in lam_t: probe it
            else:
                np.multiply(c, self.lam, out=c)
            np.add(c, d, out=c)  # delta + lam * delta * delta * (w - w_b)
            subtract_scaled(out, w, scale, c)
            total += probe(out)
            return total

        total = run_chunked(kernel, self._next, self._floats(), base, delta, *adaptive, scratch=1)
        self._require_finite(total, [self._next, new_ms if adaptive else []], delta, base)
        if self._mean_square is not None:
            self._mean_square, self._pool[0] = new_ms, self._mean_square
        self._swap_next()
        return True

    def _rule_state(self) -> dict[str, Any]:
        ms = self._mean_square
        return {"mean_square": None if ms is None else self._copy_arrays(ms)}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        ms = state["mean_square"]
        if (ms is None) == self.adaptive:
            raise ValueError(f"state_dict does not match adaptive={self.adaptive}")
        self._mean_square = None if ms is None else self._copy_arrays(ms)
