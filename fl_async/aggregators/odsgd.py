"""OD-SGD's server rule: one-step-delay SGD (Xu, Dong, Xu, Liao 2020).

The rule: docs/algorithms.md, OD-SGD.
"""

from __future__ import annotations

from typing import Any

from fl_async.aggregators.base import HELD, Status
from fl_async.aggregators.kernels import Arrays
from fl_async.aggregators.ssgd import SSGD, Held
from fl_async.aggregators.updates import ClientUpdate, Rejected


class ODSGD(SSGD):
    """Step ``s`` averages the updates of iteration ``s - 1`` like SSGD, on ``flush()``.

    Every update names its ``iteration``. A fast node's iteration ``i + 1`` may arrive before a
    slow node's iteration ``i``: it waits in that iteration's own buffer, which becomes the held
    set once step ``i + 1`` is taken. An update for an iteration already stepped is rejected as
    ``too-stale``; one without an iteration as ``missing-iteration``. No staleness weight. The
    client-side compensation lives in the strategy (``fl_async.strategies.ODSGD``), so standard
    ClientApps work.
    """

    name = "ODSGD"

    @property
    def pending_iterations(self) -> list[int]:
        """Later iterations with updates waiting for their step."""
        return sorted(self._future)

    def joins_step(self, base_version: int, iteration: int) -> bool:
        """A task joins the step being filled if it is its node's iteration of that step."""
        return iteration == self._version

    def _init_state(self) -> None:
        super()._init_state()
        self._future: dict[int, Held] = {}

    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        iteration = update.iteration
        if iteration is None:
            raise Rejected("missing-iteration")
        if iteration < self._version:
            raise Rejected("too-stale")
        if iteration == self._version:
            self._hold(self._held, update, delta, base)
            return HELD
        bucket = self._future.get(iteration, {})
        self._hold(bucket, update, delta, base)
        self._future[iteration] = bucket
        return HELD

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
