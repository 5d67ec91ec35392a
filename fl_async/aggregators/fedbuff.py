"""FedBuff: buffered asynchronous aggregation (Nguyen et al. 2022; ALGORITHMS.md, "FedBuff")."""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    Aggregator,
    Arrays,
    ClientUpdate,
    check_count,
    check_fraction,
    check_non_negative,
    probe,
    run_chunked,
    subtract_scaled,
)
from fl_async.aggregators.staleness import Polynomial, StalenessFn


class FedBuff(Aggregator):
    """Buffer ``B += s(tau) * delta``; every ``buffer_size`` updates step with ``B / K``.

    At a step: ``m <- beta * m + B / K``; ``w <- w - lr * m``; ``B <- 0`` (``beta = 0``: no
    server momentum).
    """

    name = "FedBuff"
    default_staleness = Polynomial(a=0.5)

    def __init__(
        self,
        *,
        buffer_size: int = 10,
        lr: float = 1.0,
        server_momentum: float = 0.0,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.buffer_size = check_count("buffer_size", buffer_size, minimum=1)
        self.lr = check_non_negative("lr", lr)
        self.server_momentum = check_fraction(
            "server_momentum", server_momentum, low=0.0, high=1.0, high_open=True
        )

    @property
    def count(self) -> int:
        """Updates held in the buffer since the last step."""
        return self._count

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "buffer_size": self.buffer_size,
            "lr": self.lr,
            "server_momentum": self.server_momentum,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        self._buffer = self._zeros()
        self._momentum = self._zeros() if self.server_momentum > 0 else None
        self._count = 0

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        new_buffer, new_momentum = self._scratch(2)
        if self._count + 1 < self.buffer_size:

            def add(nb, b, d) -> float:
                np.multiply(d, weight, out=nb)
                np.add(b, nb, out=nb)  # B + s(tau) * delta
                return probe(nb)

            total = run_chunked(add, new_buffer, self._buffer, delta)
            self._require_finite(total, [new_buffer], delta, base)
            self._buffer, self._pool[0] = new_buffer, self._buffer
            self._count += 1
            return False

        def add_and_step(nb, b, d, out, w, *mom) -> float:
            np.multiply(d, weight, out=nb)
            np.add(b, nb, out=nb)
            np.divide(nb, self.buffer_size, out=nb)  # B / K
            step = nb
            if mom:
                step, m = mom
                np.multiply(m, self.server_momentum, out=step)
                np.add(step, nb, out=step)  # m = beta * m + B / K
            subtract_scaled(out, w, self.lr, step)  # w - lr * m
            return probe(out)  # B and m reach w through finite factors

        momentum = [] if self._momentum is None else [new_momentum, self._momentum]
        lists = [new_buffer, self._buffer, delta, self._next, self._floats(), *momentum]
        total = run_chunked(add_and_step, *lists)
        self._require_finite(total, [self._next, new_buffer], delta, base)
        if self._momentum is not None:
            self._momentum, self._pool[1] = new_momentum, self._momentum
        for b in self._buffer:
            b.fill(0.0)
        self._count = 0
        self._swap_next()
        return True

    def _rule_state(self) -> dict[str, Any]:
        return {
            "buffer": self._copy_arrays(self._buffer),
            "momentum": None if self._momentum is None else self._copy_arrays(self._momentum),
            "count": self._count,
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._buffer = self._copy_arrays(state["buffer"])
        momentum = state["momentum"]
        self._momentum = None if momentum is None else self._copy_arrays(momentum)
        if (self._momentum is None) != (self.server_momentum == 0):
            raise ValueError(
                f"state_dict server momentum does not match server_momentum={self.server_momentum}"
            )
        self._count = int(state["count"])
