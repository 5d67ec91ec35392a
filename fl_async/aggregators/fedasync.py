"""FedAsync (Xie, Koyejo, Gupta 2019; ALGORITHMS.md, "FedAsync")."""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    Aggregator,
    Arrays,
    ClientUpdate,
    check_fraction,
    probe,
    run_chunked,
)
from fl_async.aggregators.staleness import Polynomial, StalenessFn


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
        if alpha == 0:
            raise ValueError("alpha must be in (0, 1], got 0")
        self.alpha = check_fraction("alpha", alpha, low=0.0, high=1.0, high_open=False)

    def hyperparameters(self) -> dict[str, Any]:
        return {"alpha": self.alpha, **super().hyperparameters()}

    def _init_state(self) -> None:
        pass

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        a = self.alpha * weight

        def kernel(out, w, b, d, t) -> float:
            np.subtract(b, d, out=out)  # the node's model w_k = w_b - delta
            np.multiply(out, a, out=out)
            np.multiply(w, 1.0 - a, out=t)
            np.add(t, out, out=out)  # (1 - a) * w + a * w_k
            return probe(out)

        total = run_chunked(kernel, self._next, self._floats(), base, delta, scratch=1)
        self._require_finite(total, [self._next], delta, base)
        self._swap_next()
        return True
