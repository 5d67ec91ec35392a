"""ASGD: asynchronous SGD (docs/algorithms.md, ASGD)."""

from __future__ import annotations

from typing import Any

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe, subtract_scaled
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate
from fl_async.validation import check_number


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
        self.lr = check_number("lr", lr, minimum=0)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, **super().hyperparameters()}

    def _init_state(self) -> None:
        pass

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        scale = self.lr * weight

        def kernel(out, w, d) -> float:
            subtract_scaled(out, w, scale, d)  # w - lr * s(tau) * delta
            return probe(out)

        self._advance(kernel, [MODEL], [delta], delta=delta, base=base)
        return APPLIED
