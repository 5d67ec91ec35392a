"""Task bases: the event loop's one extension point, a task-specific base model.

By default every task starts from the current global model. A ``TaskBases`` may give a node's
task a base of its own instead, and learns of every accepted update. OD-SGD uses it for its
server-side compensation (docs/algorithms.md, OD-SGD); a new rule that needs to shape what a
node starts from plugs in here, with no other hook into the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Arrays = list[np.ndarray]


class TaskBases:
    """Every task starts from the global model (the default)."""

    def base_for(
        self, stable_id: int, iteration: int, params: Sequence[np.ndarray], version: int
    ) -> Arrays | None:
        """The base of node ``stable_id``'s ``iteration``-th task, the global model being
        ``params`` at ``version``; None for the global model itself."""
        return None

    def accepted(self, stable_id: int, delta: Sequence[np.ndarray]) -> None:  # noqa: B027
        """Node ``stable_id``'s update ``delta`` was accepted."""

    def state_dict(self) -> dict[str, Any]:
        """Copies of all state (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Restore ``state_dict()``."""


class DelayCompensation(TaskBases):
    """OD-SGD's compensation: while version ``v`` lacks node ``k``'s previous update
    ``delta_prev`` (``v < iteration``: version ``v`` holds iterations ``0..v-1``), its task
    starts from ``w - local_lr * delta_prev``."""

    def __init__(self, local_lr: float) -> None:
        self.local_lr = float(local_lr)
        self._previous: dict[int, Arrays] = {}

    def base_for(
        self, stable_id: int, iteration: int, params: Sequence[np.ndarray], version: int
    ) -> Arrays | None:
        previous = self._previous.get(stable_id)
        if previous is None or version >= iteration:
            return None
        return [
            w - self.local_lr * d if w.dtype.kind == "f" else w.copy()
            for w, d in zip(params, previous, strict=True)
        ]

    def accepted(self, stable_id: int, delta: Sequence[np.ndarray]) -> None:
        self._previous[stable_id] = [np.array(d, copy=True) for d in delta]

    def state_dict(self) -> dict[str, Any]:
        return {"previous": {k: [d.copy() for d in v] for k, v in self._previous.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._previous = {int(k): [np.array(d) for d in v] for k, v in state["previous"].items()}
