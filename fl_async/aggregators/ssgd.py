"""SSGD: the synchronous baseline, FedAvg with a server learning rate (ALGORITHMS.md, "SSGD")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fl_async.aggregators.base import (
    Aggregator,
    Arrays,
    ClientUpdate,
    Rejected,
    all_finite,
    check_count,
    check_non_negative,
    probe,
    run_chunked,
    subtract_scaled,
)


class SSGD(Aggregator):
    """Step once ``num_nodes`` updates are held: ``w <- w - lr * sum(n_k d_k) / sum(n_k)``.

    With ``lr = 1`` this is FedAvg. Held updates are summed in node-id order, not arrival
    order, so a seeded run is bit-reproducible. Updates with staleness > 0 are rejected (FedAvg
    drops late replies); so is a second update from a node in the same step. When every
    ``n_k`` is 0 the updates are weighted equally. ``num_nodes=None`` steps only on ``flush()``.
    """

    name = "SSGD"

    def __init__(self, *, lr: float = 1.0, num_nodes: int | None = None) -> None:
        super().__init__(staleness=None, max_staleness=None)
        self.lr = check_non_negative("lr", lr)
        self.num_nodes = num_nodes

    @property
    def num_nodes(self) -> int | None:
        """How many updates make a step (set by the strategy for each step)."""
        return self._num_nodes

    @num_nodes.setter
    def num_nodes(self, value: int | None) -> None:
        self._num_nodes = check_count("num_nodes", value, minimum=1, allow_none=True)

    @property
    def held(self) -> int:
        """Updates held for the next step."""
        return len(self._held)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "num_nodes": self._num_nodes}

    def flush(self) -> bool:
        """Step with the updates held now (a selected node failed); return whether it stepped.

        If that step would overflow, the held updates are dropped and counted as ``overflow``.
        """
        if not self._held:
            return False
        if not self._aggregate(extra=None):
            for _ in self._held:
                self.num_rejected["overflow"] = self.num_rejected.get("overflow", 0) + 1
            self._release_all()
            self._pending = {}
            return False
        self._commit()
        self._finish_step()
        return True

    def _init_state(self) -> None:
        self._held: dict[int, tuple[int, Arrays]] = {}  # node id -> (num_examples, delta copy)
        self._free: list[Arrays] = []

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        if update.staleness > 0:
            raise Rejected("too-stale")
        return self._barrier_step(update, delta, base)

    def _barrier_step(self, update: ClientUpdate, delta: Arrays, base: Arrays | None) -> bool:
        """Hold the update, or step if it completes the barrier."""
        if update.node_id in self._held:
            raise Rejected("duplicate")
        if self._num_nodes is None or len(self._held) + 1 < self._num_nodes:
            self._held[update.node_id] = self._hold(update, delta, base)
            return False
        entry = (int(update.num_examples), delta)
        if not self._aggregate(extra=(update.node_id, entry)):
            self._require_finite(float("nan"), [self._next], delta, base)
        self._commit()
        return True

    def _hold(self, update: ClientUpdate, delta: Arrays, base: Arrays | None) -> tuple[int, Arrays]:
        """A checked copy of the update's delta in a reused slot, with its example count."""
        slot = self._free.pop() if self._free else self._zeros()

        def kernel(s, d) -> float:
            np.copyto(s, d)
            return probe(s)

        total = run_chunked(kernel, slot, delta)
        try:
            self._require_finite(total, [slot], delta, base)
        except Rejected:
            self._free.append(slot)
            raise
        return int(update.num_examples), slot

    def _aggregate(self, extra: tuple[int, tuple[int, Arrays]] | None) -> bool:
        """Write the step's new model into ``self._next``; return whether it is finite."""
        entries = dict(self._held)
        if extra is not None:
            entries[extra[0]] = extra[1]
        order = sorted(entries)
        examples = sum(entries[k][0] for k in order)
        shares = [entries[k][0] / examples if examples > 0 else 1.0 / len(order) for k in order]
        deltas = [entries[k][1] for k in order]

        def kernel(out, w, *rest) -> float:
            *ds, a = rest
            np.multiply(ds[0], shares[0], out=a)
            for d, share in zip(ds[1:], shares[1:], strict=True):
                np.multiply(d, share, out=out)
                np.add(a, out, out=a)  # sum of n_k * delta_k / sum(n_k), in node order
            subtract_scaled(out, w, self.lr, a)
            return probe(out)

        total = run_chunked(kernel, self._next, self._floats(), *deltas, scratch=1)
        return math.isfinite(total) or all_finite(self._next)

    def _commit(self) -> None:
        self._release_all()
        self._swap_next()

    def _release_all(self) -> None:
        self._free.extend(slot for _, slot in self._held.values())
        self._held = {}

    def _rule_state(self) -> dict[str, Any]:
        return {
            "held": {k: (n, self._copy_arrays(d)) for k, (n, d) in self._held.items()},
            "num_nodes": self._num_nodes,
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._held = {k: (int(n), self._copy_arrays(d)) for k, (n, d) in state["held"].items()}
        self._free = []
        self.num_nodes = state["num_nodes"]
