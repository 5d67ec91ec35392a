"""FedBuff: buffered asynchronous aggregation (Nguyen et al. 2022; docs/algorithms.md, FedBuff)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.aggregators.base import HELD, MODEL, STEPPED, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe, subtract_scaled
from fl_async.aggregators.optimizers import Momentum
from fl_async.aggregators.robust import MEAN, TRIM, check_combine, combine_chunk
from fl_async.aggregators.staleness import Polynomial, StalenessFn
from fl_async.aggregators.updates import ClientUpdate, Rejected
from fl_async.validation import check_int, check_number


class FedBuff(Aggregator):
    """Buffer ``B += s(tau) * delta``; every ``buffer_size`` updates step with ``B / K``.

    At a step: ``m <- beta * m + B / K``; ``w <- w - lr * m``; ``B <- 0`` (``beta = 0``: no
    server momentum). The buffer steps by itself when full: it is not a barrier (``held`` is 0).
    ``combine="median"`` or ``"trimmed-mean"`` (cutting ``trim`` of each end) holds the K
    weighted updates ``s(tau) * delta`` and replaces ``B / K`` by their coordinate-wise median
    or trimmed mean (docs/algorithms.md, Robust combination of a buffer).
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
        combine: str = MEAN,
        trim: float = TRIM,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.combine, self.trim = check_combine(combine, trim)
        self.buffer_size = check_int("buffer_size", buffer_size, minimum=1)
        self.lr = check_number("lr", lr, minimum=0)
        self.server_momentum = check_number(
            "server_momentum", server_momentum, minimum=0, maximum=1, max_open=True
        )
        self.optimizer = Momentum(beta=self.server_momentum)
        """The server momentum (the shared one), when ``server_momentum > 0``."""

    @property
    def count(self) -> int:
        """Updates held in the buffer since the last step."""
        return self._count

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "buffer_size": self.buffer_size,
            "lr": self.lr,
            "server_momentum": self.server_momentum,
            "combine": self.combine,
            "trim": self.trim,
            **super().hyperparameters(),
        }

    def _init_state(self) -> None:
        if self.combine == MEAN:
            self._acc["B"] = self._zeros()
        if self.server_momentum > 0:
            self._acc["m"] = self._zeros()
        self._count = 0
        self._items: list[Arrays] = []
        """``combine`` other than the mean: the weighted updates held, in arrival order."""
        self._free: list[Arrays] = []  # slots of released items, reused

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        if self.combine != MEAN:
            return self._robust_step(delta, base, weight)
        if self._count + 1 < self.buffer_size:
            self._add(delta, base, weight)
            self._count += 1
            return HELD
        self._add_and_step(delta, base, weight)
        self._count = 0
        return STEPPED

    def _add(self, delta: Arrays, base: Arrays | None, weight: float) -> None:
        """``B <- B + s(tau) * delta``."""

        def add(nb, b, d) -> float:
            np.multiply(d, weight, out=nb)
            np.add(b, nb, out=nb)  # B + s(tau) * delta
            return probe(nb)

        self._advance(add, ["B"], [delta], delta=delta, base=base)

    def _add_and_step(self, delta: Arrays, base: Arrays | None, weight: float) -> None:
        """Add the last update, step with ``B / K``, then empty the buffer."""

        def add_and_step(nb, b, out, w, *rest) -> float:
            *mom, d = rest
            np.multiply(d, weight, out=nb)
            np.add(b, nb, out=nb)
            np.divide(nb, self.buffer_size, out=nb)  # B / K
            step = nb
            if mom:  # m = beta * m + B / K
                new_m, m = mom
                terms = ((nb, 1.0),)
                self.optimizer.accumulate_chunk(new_m=new_m, m=m, terms=terms, tmp=new_m)
                step = new_m
            subtract_scaled(out, w, self.lr, step)  # w - lr * m
            return probe(out)  # B and m reach w through finite factors

        names = ["B", MODEL, *(["m"] if "m" in self._acc else [])]
        self._advance(add_and_step, names, [delta], delta=delta, base=base)
        for b in self._acc["B"]:  # B / K was published as B: the buffer starts empty
            b.fill(0.0)

    def _robust_step(self, delta: Arrays, base: Arrays | None, weight: float) -> Status:
        """Hold ``s(tau) * delta``; once K are held, step with their robust combination."""
        self._hold(delta, base, weight)
        if len(self._items) < self.buffer_size:
            self._count = len(self._items)
            return HELD
        combine, trim, momentum = self.combine, self.trim, self.optimizer

        def combine_and_step(out, w, *rest) -> float:
            *rest, c = rest  # c: the combined chunk
            if "m" in self._acc:
                nm, m, *items = rest
                combine_chunk(c, items, combine, trim)
                # m = beta * m + combined
                momentum.accumulate_chunk(new_m=nm, m=m, terms=((c, 1.0),), tmp=nm)
                c = nm
            else:
                combine_chunk(c, rest, combine, trim)
            subtract_scaled(out, w, self.lr, c)
            return probe(out)  # m reaches w through a finite factor

        names = [MODEL, *(["m"] if "m" in self._acc else [])]
        try:
            self._advance(combine_and_step, names, self._items, delta=delta, base=base, scratch=1)
        except Rejected:
            self._free.append(self._items.pop())  # the buffer as it was before this update
            raise
        self._free.extend(self._items)
        self._items, self._count = [], 0
        return STEPPED

    def _hold(self, delta: Arrays, base: Arrays | None, weight: float) -> None:
        """Hold a checked copy of ``s(tau) * delta`` in a reused slot."""
        self._items.append(self._checked_copy(self._free, delta, base, weight))

    def _rule_state(self) -> dict[str, Any]:
        momentum = self._acc.get("m")
        state = {
            "buffer": self._copy_arrays(self._acc["B"]) if self.combine == MEAN else None,
            "momentum": None if momentum is None else self._copy_arrays(momentum),
            "count": self._count,
        }
        if self.combine != MEAN:
            state["items"] = [self._copy_arrays(item) for item in self._items]
        return state

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        if (state["buffer"] is None) != (self.combine != MEAN):
            raise ValueError(f"state_dict buffer does not match combine={self.combine!r}")
        if self.combine == MEAN:
            self._acc["B"] = self._copy_arrays(state["buffer"])
        else:
            self._items = [self._copy_arrays(item) for item in state["items"]]
            self._free = []
        if (state["momentum"] is None) != (self.server_momentum == 0):
            raise ValueError(
                f"state_dict server momentum does not match server_momentum={self.server_momentum}"
            )
        if state["momentum"] is not None:
            self._acc["m"] = self._copy_arrays(state["momentum"])
        self._count = int(state["count"])
