"""FedAsync (Xie, Koyejo, Gupta 2019; docs/algorithms.md, FedAsync)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe
from fl_async.aggregators.staleness import Polynomial, StalenessFn
from fl_async.aggregators.updates import ClientUpdate
from fl_async.validation import check_number


class FedAsync(Aggregator):
    """Mix the node's model in: ``a = alpha * s(tau)``; ``w <- (1 - a) * w + a * (w_b - delta)``.

    Clients may add the proximal term ``(mu / 2) * ||x - w_b||^2`` (the ClientApp's
    ``proximal-mu``); the server rule does not depend on it.
    """

    name = "FedAsync"
    needs_base = True
    default_staleness = Polynomial(a=0.5)

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.alpha = check_number("alpha", alpha, minimum=0, maximum=1, min_open=True)

    def hyperparameters(self) -> dict[str, Any]:
        return {"alpha": self.alpha, **super().hyperparameters()}

    def _init_state(self) -> None:
        pass

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        a = self.alpha * weight

        def kernel(out, w, b, d, t) -> float:
            np.subtract(b, d, out=out)  # the node's model w_k = w_b - delta
            np.multiply(out, a, out=out)
            np.multiply(w, 1.0 - a, out=t)
            np.add(t, out, out=out)  # (1 - a) * w + a * w_k
            return probe(out)  # NaN/Inf in the base reaches w too

        self._advance(kernel, [MODEL], [base, delta], delta=delta, base=base, scratch=1)
        return APPLIED
