"""ASGD: asynchronous SGD (ALGORITHMS.md, "ASGD")."""

from __future__ import annotations

from typing import Any

from fl_async.aggregators.base import (
    Aggregator,
    Arrays,
    ClientUpdate,
    check_non_negative,
    probe,
    run_chunked,
    subtract_scaled,
)
from fl_async.aggregators.staleness import StalenessFn


class ASGD(Aggregator):
    """Apply every update at once: ``w <- w - lr * s(tau) * delta``."""

    name = "ASGD"

    def __init__(
        self,
        *,
        lr: float = 1.0,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.lr = check_non_negative("lr", lr)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, **super().hyperparameters()}

    def _init_state(self) -> None:
        pass

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        scale = self.lr * weight

        def kernel(out, w, d) -> float:
            subtract_scaled(out, w, scale, d)  # w - lr * s(tau) * delta
            return probe(out)

        total = run_chunked(kernel, self._next, self._floats(), delta)
        self._require_finite(total, [self._next], delta, base)
        self._swap_next()
        return True
