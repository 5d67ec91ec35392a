"""OD-SGD's server rule: one-step-delay SGD (Xu, Dong, Xu, Liao 2020; ALGORITHMS.md, "OD-SGD")."""

from __future__ import annotations

from typing import Any

from fl_async.aggregators.base import Arrays, ClientUpdate, Rejected
from fl_async.aggregators.ssgd import SSGD


class ODSGD(SSGD):
    """Step ``s`` averages the ``num_nodes`` updates of iteration ``s - 1`` like SSGD.

    Every update names its ``iteration``. A fast node's iteration ``i + 1`` may arrive before a
    slow node's iteration ``i``: it waits in that iteration's own buffer. An update for an
    iteration already stepped is rejected as ``too-stale``; one without an iteration as
    ``missing-iteration``. No staleness weight. The client-side compensation lives in the
    strategy (``fl_async.strategies.ODSGD``), so standard ClientApps work.
    """

    name = "ODSGD"

    def __init__(self, *, lr: float = 1.0, num_nodes: int | None = None) -> None:
        super().__init__(lr=lr, num_nodes=num_nodes)

    @property
    def pending_iterations(self) -> list[int]:
        """Later iterations with updates waiting for their step."""
        return sorted(self._future)

    def _init_state(self) -> None:
        super()._init_state()
        self._future: dict[int, dict[int, tuple[int, Arrays]]] = {}

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> bool:
        iteration = update.iteration
        if iteration is None:
            raise Rejected("missing-iteration")
        if iteration < self._version:
            raise Rejected("too-stale")
        if iteration == self._version:
            return self._barrier_step(update, delta, base)
        bucket = self._future.setdefault(iteration, {})
        if update.node_id in bucket:
            raise Rejected("duplicate")
        bucket[update.node_id] = self._hold(update, delta, base)
        return False

    def _finish_step(self) -> None:
        super()._finish_step()
        self._held = self._future.pop(self._version, {})

    def _rule_state(self) -> dict[str, Any]:
        state = super()._rule_state()
        state["future"] = {
            it: {k: (n, self._copy_arrays(d)) for k, (n, d) in bucket.items()}
            for it, bucket in self._future.items()
        }
        return state

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        super()._load_rule_state(state)
        self._future = {
            int(it): {k: (int(n), self._copy_arrays(d)) for k, (n, d) in bucket.items()}
            for it, bucket in state["future"].items()
        }
