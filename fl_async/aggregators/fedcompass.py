"""FedCompass's group step (docs/algorithms.md, FedCompass).

Every update is held, with the version its task started from. A step takes the held updates of
a set of nodes ``U`` (the plan's, or all of them) and moves the model by

    w <- w - sum_{k in U} alpha * s(tau_k) / N * delta_k,    tau_k = v - b_k at the step,

summed in ascending node id. ``N`` is the number of nodes (every node, not ``|U|``): with one
group of all ``N`` nodes, ``tau = 0`` and a constant ``s`` this is SSGD with ``lr = alpha``.
Which updates step together is the dispatch policy's business (``fl_async.scheduling.Compass``,
the plan): it groups nodes so that they arrive together, and says when a group is due.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import numpy as np

from fl_async.aggregators.base import HELD, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe, run_chunked
from fl_async.aggregators.staleness import Polynomial, StalenessFn
from fl_async.aggregators.updates import ClientUpdate
from fl_async.validation import check_int, check_number

logger = logging.getLogger(__name__)

SUPERSEDED = "superseded"
"""The ``num_rejected`` key of a held update replaced by a newer one of its node before it
stepped (its node was late, and arrived again before any step)."""


class StepPlan(Protocol):
    """Says which held updates step together: FedCompass's dispatch policy."""

    def steps_due(self) -> int:
        """The steps the plan has due now."""

    def take_step(self) -> list[int] | None:
        """The nodes of the next due step (removed from the plan); None when none is due."""


class FedCompass(Aggregator):
    """FedCompass's aggregation: hold each update; ``flush()`` steps a group of them.

    ``alpha`` is the server rate, ``num_nodes`` ``N``, ``staleness`` ``s`` (default
    ``Polynomial(0.5)``, the authors' examples), weighed at the step. ``plan`` (the
    ``Compass`` policy) names each step's nodes; without one ``flush()`` steps every held
    update, a barrier. A node holds one update: a newer one replaces it (``superseded``).
    """

    name = "FedCompass"
    default_staleness = Polynomial(a=0.5)

    def __init__(
        self,
        *,
        alpha: float = 0.9,
        num_nodes: int = 1,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        plan: StepPlan | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.alpha = check_number("alpha", alpha, minimum=0)
        self.num_nodes = check_int("num_nodes", num_nodes, minimum=1)
        self.plan = plan

    @property
    def held(self) -> int:
        """Updates held, plus the steps the plan has due (a due step whose updates were all
        rejected is still taken off the plan by ``flush``)."""
        return len(self._held) + (self.plan.steps_due() if self.plan is not None else 0)

    def hyperparameters(self) -> dict[str, Any]:
        return {**super().hyperparameters(), "alpha": self.alpha, "num_nodes": self.num_nodes}

    def flush(self) -> bool:
        """Take the next due step that has a held update; return whether a step was taken.

        A step that would overflow is taken with the model unchanged and its updates rejected
        as ``overflow`` (as SSGD's).
        """
        while (nodes := self._next_step()) is not None:
            chosen = sorted(k for k in nodes if k in self._held)
            if chosen:
                self._group_step(chosen)
                return True
        return False

    def _next_step(self) -> list[int] | None:
        if self.plan is not None:
            return self.plan.take_step()
        return list(self._held) if self._held else None

    def _init_state(self) -> None:
        self._held: dict[int, tuple[int, Arrays]] = {}
        self._free: list[Arrays] = []  # slots of released updates, reused

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        slot = self._checked_copy(self._free, delta, base)
        old = self._held.pop(update.node_id, None)
        if old is not None:
            self._free.append(old[1])
            self.num_rejected[SUPERSEDED] = self.num_rejected.get(SUPERSEDED, 0) + 1
        self._held[update.node_id] = (self._version - int(update.staleness), slot)
        return HELD

    def coefficients(self, nodes: list[int]) -> list[float]:
        """``alpha * s(tau_k) / N`` of each of ``nodes``' held updates, ``tau_k`` as of now."""
        return [
            self.alpha * float(self.staleness(self._version - self._held[k][0])) / self.num_nodes
            for k in nodes
        ]

    def _group_step(self, nodes: list[int]) -> None:
        """``w <- w - sum_k c_k delta_k`` over ``nodes`` (ascending), the held updates released."""
        shares = self.coefficients(nodes)
        deltas = [self._held[k][1] for k in nodes]

        def kernel(out, w, *rest) -> float:
            *ds, a = rest
            np.multiply(ds[0], shares[0], out=a)
            for d, share in zip(ds[1:], shares[1:], strict=True):
                np.multiply(d, share, out=out)
                np.add(a, out, out=a)
            np.subtract(w, a, out=out)
            return probe(out)

        (new,) = self._twins(MODEL)
        total = run_chunked(kernel, new, self._floats(), *deltas, scratch=1)
        if self._twins_finite(total, MODEL):
            self._swap(MODEL)
        else:
            self.num_rejected["overflow"] = self.num_rejected.get("overflow", 0) + len(nodes)
            self._pending = {}
            logger.warning(
                "%s took step %d with the model unchanged: the updates of nodes %s overflowed",
                self.name,
                self._version + 1,
                nodes,
            )
        for k in nodes:
            self._free.append(self._held.pop(k)[1])
        self._finish_step()

    def _rule_state(self) -> dict[str, Any]:
        return {"held": {k: (b, self._copy_arrays(d)) for k, (b, d) in self._held.items()}}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._held = {int(k): (int(b), self._copy_arrays(d)) for k, (b, d) in state["held"].items()}
        self._free = []
