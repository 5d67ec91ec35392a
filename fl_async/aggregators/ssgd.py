"""SSGD: the synchronous baseline, FedAvg with a server learning rate (docs/algorithms.md, SSGD)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from fl_async.aggregators.base import HELD, MODEL, Aggregator, Status
from fl_async.aggregators.kernels import Arrays, probe, run_chunked, subtract_scaled
from fl_async.aggregators.robust import MEAN, TRIM, check_combine, combine_chunk
from fl_async.aggregators.updates import ClientUpdate, Rejected
from fl_async.validation import check_number

logger = logging.getLogger(__name__)

Held = dict[int, tuple[int, Arrays]]
"""Held updates: node id -> (num_examples, a copy of its delta)."""


class SSGD(Aggregator):
    """A barrier: hold updates, and on ``flush()`` step ``w <- w - lr * sum(n_k d_k) / sum(n_k)``.

    With ``lr = 1`` this is FedAvg. The event loop flushes once no update for the step is owed
    (``joins_step``: a task dispatched at the current version). Held updates are summed in
    node-id order, not arrival order, so a seeded run is bit-reproducible. Updates with
    staleness > 0 are rejected (FedAvg drops late replies); so is a second update from a node
    in the same step. When every ``n_k`` is 0 the updates are weighted equally.
    ``combine="median"`` or ``"trimmed-mean"`` (cutting ``trim`` of each end) steps with the
    coordinate-wise median or trimmed mean of the held updates instead, unweighted
    (docs/algorithms.md, Robust combination of a buffer).
    """

    name = "SSGD"

    def __init__(self, *, lr: float = 1.0, combine: str = MEAN, trim: float = TRIM) -> None:
        super().__init__(staleness=None, max_staleness=None)
        self.lr = check_number("lr", lr, minimum=0)
        self.combine, self.trim = check_combine(combine, trim)

    @property
    def held(self) -> int:
        """Updates held for the step now being filled."""
        return len(self._held)

    def joins_step(self, base_version: int, iteration: int) -> bool:
        """A task joins the step being filled if it started from the current version."""
        return base_version == self._version

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "combine": self.combine, "trim": self.trim}

    def flush(self) -> bool:
        """Step with the updates held now; return whether a step was taken (False: none held).

        A step that would overflow is still taken, with the model unchanged (the version counts
        server steps), and every held update is rejected as ``overflow``.
        """
        if not self._held:
            return False
        if self._aggregate():
            self._swap(MODEL)
        else:
            self._drop_held("overflow")
        self._release_all()
        self._finish_step()
        return True

    def _init_state(self) -> None:
        self._held: Held = {}
        self._free: list[Arrays] = []  # slots of released updates, reused

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        if update.staleness > 0:
            raise Rejected("too-stale")
        self._hold(self._held, update, delta, base)
        return HELD

    def _hold(self, bucket: Held, update: ClientUpdate, delta: Arrays, base: Arrays | None) -> None:
        """Put a checked copy of the update's delta, in a reused slot, into ``bucket``."""
        if update.node_id in bucket:
            raise Rejected("duplicate")
        slot = self._checked_copy(self._free, delta, base)
        bucket[update.node_id] = (int(update.num_examples), slot)

    def _aggregate(self) -> bool:
        """Write the step's new model into the model's twin; return whether it is finite."""
        if self.combine != MEAN:
            return self._aggregate_robust()
        order = sorted(self._held)
        examples = sum(self._held[k][0] for k in order)
        shares = [self._held[k][0] / examples if examples > 0 else 1.0 / len(order) for k in order]
        deltas = [self._held[k][1] for k in order]

        def kernel(out, w, *rest) -> float:
            *ds, a = rest
            np.multiply(ds[0], shares[0], out=a)
            for d, share in zip(ds[1:], shares[1:], strict=True):
                np.multiply(d, share, out=out)
                np.add(a, out, out=a)  # sum of n_k * delta_k / sum(n_k), in node order
            subtract_scaled(out, w, self.lr, a)
            return probe(out)

        (new,) = self._twins(MODEL)
        total = run_chunked(kernel, new, self._floats(), *deltas, scratch=1)
        return self._twins_finite(total, MODEL)

    def _aggregate_robust(self) -> bool:
        """``_aggregate`` with the coordinate-wise median or trimmed mean of the held updates."""
        deltas = [self._held[k][1] for k in sorted(self._held)]
        combine, trim = self.combine, self.trim

        def kernel(out, w, *rest) -> float:
            *ds, c = rest
            combine_chunk(c, ds, combine, trim)
            subtract_scaled(out, w, self.lr, c)
            return probe(out)

        (new,) = self._twins(MODEL)
        total = run_chunked(kernel, new, self._floats(), *deltas, scratch=1)
        return self._twins_finite(total, MODEL)

    def _drop_held(self, reason: str) -> None:
        """Reject every held update (counted and logged); their other arrays go with them."""
        nodes = sorted(self._held)
        self.num_rejected[reason] = self.num_rejected.get(reason, 0) + len(nodes)
        self._pending = {}
        logger.warning(
            "%s took step %d with the model unchanged: the updates of nodes %s were rejected: %s",
            self.name,
            self._version + 1,
            nodes,
            reason,
        )

    def _release_all(self) -> None:
        self._free.extend(slot for _, slot in self._held.values())
        self._held = {}

    def _rule_state(self) -> dict[str, Any]:
        return {"held": {k: (n, self._copy_arrays(d)) for k, (n, d) in self._held.items()}}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        # A state saved when SSGD still had ``num_nodes`` carries that key: it is ignored.
        self._held = {k: (int(n), self._copy_arrays(d)) for k, (n, d) in state["held"].items()}
        self._free = []
