"""DC-ASGD: delay-compensated ASGD (Zheng et al. 2017; ALGORITHMS.md, "DC-ASGD")."""

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
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        # ||delta||^2 and ||w_b||^2: they bound the step, and reject NaN/Inf in either.
        size = squared_norm(delta)
        base_size = squared_norm(base)
        if not (math.isfinite(size) and math.isfinite(base_size)):
            raise Rejected("non-finite")
        if self._fits(math.sqrt(size), math.sqrt(base_size), weight):
            # The step provably stays finite: update w (and M) in place, in one pass.
            ms = [] if self._mean_square is None else [self._mean_square] * 2
            kernel = self._kernel(weight, probes=False)
            run_chunked(kernel, self._floats(), self._floats(), base, delta, *ms, scratch=2)
            return True
        # Too close to overflow to prove it finite: compute into scratch, check, then swap.
        (new_ms,) = self._scratch(1)
        ms = [] if self._mean_square is None else [new_ms, self._mean_square]
        kernel = self._kernel(weight, probes=True)
        total = run_chunked(kernel, self._next, self._floats(), base, delta, *ms, scratch=2)
        self._require_finite(total, [self._next, new_ms if ms else []], delta, base)
        if self._mean_square is not None:
            self._mean_square, self._pool[0] = new_ms, self._mean_square
        self._swap_next()
        self._measure_bounds()
        return True

    def _kernel(self, weight: float, *, probes: bool):
        """The rule on one chunk. Outputs may be the inputs themselves (in place): every input
        value is read before its output is written."""
        scale = self.lr * weight

        def kernel(out, w, b, d, *rest) -> float:
            *ms, c, tmp = rest
            total = 0.0
            np.subtract(w, b, out=c)  # w - w_b
            np.multiply(c, d, out=c)
            np.multiply(c, d, out=c)
            if ms:
                nm, m = ms
                np.multiply(d, d, out=tmp)
                np.multiply(tmp, 1.0 - self.ms_decay, out=tmp)
                np.multiply(m, self.ms_decay, out=nm)
                np.add(nm, tmp, out=nm)  # M = m * M + (1 - m) * delta^2
                np.add(nm, 1e-7, out=tmp)
                np.sqrt(tmp, out=tmp)
                np.divide(self.lam0, tmp, out=tmp)  # lam_t = lam0 / sqrt(M + 1e-7)
                np.multiply(c, tmp, out=c)
                if probes:
                    total += probe(nm)  # an infinite M would vanish in lam_t: probe it
            else:
                np.multiply(c, self.lam, out=c)
            np.add(c, d, out=c)  # delta + lam * delta * delta * (w - w_b)
            if scale == 1.0:  # 1.0 * c == c exactly: skip a pass
                np.subtract(w, c, out=out)
            else:
                np.multiply(c, scale, out=c)
                np.subtract(w, c, out=out)
            return total + probe(out) if probes else 0.0

        return kernel

    def _fits(self, g: float, b: float, weight: float) -> bool:
        """Whether the step provably keeps w (and M) below ``IN_PLACE_LIMIT``; if so, record the new
        bounds (``g`` bounds ``|delta|``, ``b`` bounds ``|w_b|``)."""
        new = dict(self._bounds)
        if self._mean_square is None:
            lam = self.lam
        else:
            new["M"] = self.ms_decay * new["M"] + (1.0 - self.ms_decay) * g * g
            lam = self.lam0 / math.sqrt(1e-7)  # M >= 0
        compensated = g + lam * g * g * (new["w"] + b)
        new["w"] += self.lr * weight * compensated
        if max(new.values()) >= IN_PLACE_LIMIT:
            return False
        self._bounds = new
        return True

    def _measure_bounds(self) -> None:
        """Exact maxima of |w| and |M|: where the running bounds start."""

        self._bounds = {"w": max_abs(self._floats()), "M": max_abs(self._mean_square)}

    def _rule_state(self) -> dict[str, Any]:
        ms = self._mean_square
        return {"mean_square": None if ms is None else self._copy_arrays(ms)}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        ms = state["mean_square"]
        if (ms is None) == self.adaptive:
            raise ValueError(f"state_dict does not match adaptive={self.adaptive}")
        self._mean_square = None if ms is None else self._copy_arrays(ms)
        self._measure_bounds()
