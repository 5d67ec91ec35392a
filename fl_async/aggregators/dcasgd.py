"""DC-ASGD: delay-compensated ASGD (Zheng et al. 2017; docs/algorithms.md, DC-ASGD)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, max_abs, probe, within_limit
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, norm_bound
from fl_async.validation import InvalidArgument, check_number


class DCASGD(Aggregator):
    """``w <- w - lr * s(tau) * (delta + lam * delta * delta * (w - w_b))``, per coordinate.

    ``adaptive=True``: ``M <- ms_decay * M + (1 - ms_decay) * delta * delta`` and
    ``lam_t = lam0 / sqrt(M + 1e-7)`` replaces ``lam``.

    ``lam`` acts on the pseudo-gradient, which is about (local lr x local steps) times a
    gradient: the paper's ``lambda_grad`` corresponds to ``lam = lambda_grad / (local lr x local
    steps)``. The adaptive variant is scale-consistent and needs no such conversion.
    ``fl_async.aggregators.reference.dcasgd`` states the same rule without the fast machinery.
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
        self.lr = check_number("lr", lr, minimum=0)
        self.lam = check_number("lam", lam, minimum=0)
        if not isinstance(adaptive, bool):
            raise InvalidArgument(f"adaptive must be True or False, got {adaptive!r}")
        self.adaptive = adaptive
        self.lam0 = check_number("lam0", lam0, minimum=0)
        self.ms_decay = check_number("ms_decay", ms_decay, minimum=0, maximum=1, max_open=True)

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
        if self.adaptive:
            self._acc["M"] = self._zeros()
        self._measure_bounds()

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        # ||delta|| and ||w_b|| bound the step, and reject NaN/Inf in either.
        g, b = norm_bound(delta), norm_bound(base)
        in_place = g is not None and b is not None and self._fits(g, b, weight)
        names = (MODEL, "M") if self.adaptive else (MODEL,)
        kernel = self._kernel(weight, probes=not in_place)
        self._advance(
            kernel, names, [base, delta], in_place=in_place, delta=delta, base=base, scratch=2
        )
        if not in_place:
            self._measure_bounds()
        return APPLIED

    def _kernel(self, weight: float, *, probes: bool) -> Callable[..., float]:
        """The rule on one chunk, with or without probes. Outputs may be the inputs themselves
        (in place): every input value is read before its output is written."""
        scale = self.lr * weight

        def kernel(out, w, *rest) -> float:
            *ms, b, d, c, tmp = rest
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
        """Whether the step provably keeps w (and M) below ``IN_PLACE_LIMIT``; if so, record the
        new bounds (``g`` bounds ``|delta|``, ``b`` bounds ``|w_b|``)."""
        new = dict(self._bounds)
        if self.adaptive:
            new["M"] = self.ms_decay * new["M"] + (1.0 - self.ms_decay) * g * g
            lam = self.lam0 / math.sqrt(1e-7)  # M >= 0
        else:
            lam = self.lam
        compensated = g + lam * g * g * (new["w"] + b)
        new["w"] += self.lr * weight * compensated
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self) -> None:
        """Exact maxima of |w| and |M|: where the running bounds start."""
        self._bounds = {"w": max_abs(self._floats()), "M": max_abs(self._acc.get("M"))}

    def _rule_state(self) -> dict[str, Any]:
        ms = self._acc.get("M")
        return {"mean_square": None if ms is None else self._copy_arrays(ms)}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        ms = state["mean_square"]
        if (ms is None) == self.adaptive:
            raise ValueError(f"state_dict does not match adaptive={self.adaptive}")
        if ms is not None:
            self._acc["M"] = self._copy_arrays(ms)
        self._measure_bounds()
