"""Dispatch policies: when an idle node may start its next task.

The rules are stated in docs/algorithms.md, Dispatch policies.

Every policy keeps a clock ``c_k`` per node (its finished tasks: applied, buffered or rejected) and
the active set. The event loop calls ``join`` / ``leave`` as nodes come and go, tells it which
nodes are idle (``set_idle``), asks ``startable`` for the idle nodes that may start now, and
reports ``started`` and ``finished``. Policies hold no randomness, so a run's dispatch history
depends only on the order of these calls.

The base, ``DispatchPolicy`` (``fl_async.scheduling.dispatch``), holds the clocks, the active set
and the index of idle nodes; each rule here states only its *start limit* (and ASP its exempt
nodes).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from fl_async.scheduling.dispatch import DispatchPolicy
from fl_async.validation import check_int, check_number

__all__ = ["ASP", "SSP", "Asynchronous", "Barrier", "DispatchPolicy", "OneStepDelay", "WhiteList"]


def _check_bound(name: str, value: int) -> int:
    """A policy's bound: an integer >= 0."""
    return check_int(name, value, minimum=0)


class Asynchronous(DispatchPolicy):
    """Fully asynchronous: a node may always start a task (docs/algorithms.md, Dispatch
    policies)."""

    name = "Asynchronous"


class SSP(DispatchPolicy):
    """Stale synchronous parallel (Ho et al. 2013; docs/algorithms.md, Dispatch policies).

    A node may start only while ``c_k - min_j c_j <= staleness_bound`` over the active nodes.
    """

    name = "SSP"

    def __init__(self, staleness_bound: int) -> None:
        super().__init__()
        self.staleness_bound = _check_bound("staleness_bound", staleness_bound)

    def hyperparameters(self) -> dict[str, Any]:
        return {"staleness_bound": self.staleness_bound}

    def _start_limit(self, version: int) -> int | None:
        lowest = self._floor.min
        return None if lowest is None else lowest + self.staleness_bound


class WhiteList(SSP):
    """GSGM's white list (docs/algorithms.md, GSGM, part 1): SSP with ``staleness_bound = slack``.

    ``slack = 0`` lets every node contribute once per cycle.
    """

    name = "WhiteList"

    def __init__(self, slack: int = 0) -> None:
        super().__init__(_check_bound("slack", slack))

    def hyperparameters(self) -> dict[str, Any]:
        return {"slack": self.staleness_bound}


class Barrier(SSP):
    """A synchronous barrier, SSP with bound 0 (docs/algorithms.md, SSGD): lock-step cycles."""

    name = "Barrier"

    def __init__(self) -> None:
        super().__init__(0)

    def hyperparameters(self) -> dict[str, Any]:
        return {}


class OneStepDelay(DispatchPolicy):
    """OD-SGD's dispatch: iteration ``i = c_k`` needs version ``i - 1`` (docs/algorithms.md,
    OD-SGD).

    A node is held back only by the stragglers of the iteration before its latest one. The
    first ``warmup_steps`` iterations run as a barrier (plain SSGD): iteration ``i`` needs ``i``.
    """

    name = "OneStepDelay"

    def __init__(self, warmup_steps: int = 0) -> None:
        super().__init__()
        self.warmup_steps = _check_bound("warmup_steps", warmup_steps)

    def hyperparameters(self) -> dict[str, Any]:
        return {"warmup_steps": self.warmup_steps}

    def _start_limit(self, version: int) -> int | None:
        # Iteration c needs version max(c - 1, 0), or c during the warm-up (c < warmup_steps):
        # both grow with c, so the clocks that may start are those up to a limit.
        return version + 1 if version + 1 >= self.warmup_steps else version


class ASP(DispatchPolicy):
    """Adaptive synchronous parallel (Zhang et al. 2018; docs/algorithms.md, Dispatch policies).

    A reconstruction. Each node's task duration is an EMA ``d_k <- 0.7 d_k + 0.3 x`` (the first
    ``x`` sets it); its relative speed is ``p_k = median_j d_j / d_k``, the median over the active
    nodes measured so far. Every ``period`` finished tasks (None: the number of nodes that have
    joined) the synchronous group is recomputed: the nodes with ``p_k >= p_min``, and those not
    measured yet. Group members follow SSP with ``staleness_bound`` among themselves; the others
    may always start. A node re-entering the group has its clock raised to the group's minimum,
    as if it joined, so that it does not hold the group back for the tasks it missed.
    """

    name = "ASP"
    ema_weight: ClassVar[float] = 0.3
    """Weight of the newest duration in the EMA ``d_k``."""

    def __init__(
        self, *, staleness_bound: int = 2, p_min: float = 0.5, period: int | None = None
    ) -> None:
        super().__init__()
        self.staleness_bound = _check_bound("staleness_bound", staleness_bound)
        self.p_min = check_number("p_min", p_min, minimum=0, maximum=1, min_open=True)
        self.period = None if period is None else check_int("period", period, minimum=1)
        self._duration: dict[int, float] = {}
        self._asynchronous: set[int] = set()
        self._since_recompute = 0

    @property
    def group(self) -> frozenset[int]:
        """The synchronous group: every node that has joined and is not marked slow."""
        return frozenset(k for k in self._clock if k not in self._asynchronous)

    @property
    def durations(self) -> dict[int, float]:
        """A copy of the EMA task duration ``d_k`` of every node measured so far."""
        return dict(self._duration)

    def hyperparameters(self) -> dict[str, Any]:
        return {"staleness_bound": self.staleness_bound, "p_min": self.p_min, "period": self.period}

    def _counted(self, node: int) -> bool:
        return node in self._active and node not in self._asynchronous

    def _entry_clock(self) -> int:
        if self._floor.min is not None:
            return self._floor.min
        return min((self._clock[k] for k in self._active), default=0)

    def _start_limit(self, version: int) -> int | None:
        lowest = self._floor.min
        return None if lowest is None else lowest + self.staleness_bound

    def _exempt(self, node: int) -> bool:
        return node in self._asynchronous

    def _on_finished(self, node: int, duration: float) -> None:
        old = self._duration.get(node)
        w = self.ema_weight
        self._duration[node] = duration if old is None else (1.0 - w) * old + w * duration
        self._since_recompute += 1
        period = self.period if self.period is not None else len(self._clock)
        if self._since_recompute >= period:
            self._since_recompute = 0
            self._recompute_group()

    def _recompute_group(self) -> None:
        measured = [self._duration[k] for k in self._active if k in self._duration]
        if not measured:
            return
        median = float(np.median(measured))
        slow = {k for k, d in self._duration.items() if d > 0 and median / d < self.p_min}
        stayers = [
            self._clock[k] for k in self._active if k not in self._asynchronous and k not in slow
        ]
        entering = [k for k in self._asynchronous - slow if k in self._active]
        if stayers:
            lowest = min(stayers)
            for k in entering:
                self._clock[k] = max(self._clock[k], lowest)
        changed = self._asynchronous ^ slow  # the entering nodes are among them
        self._asynchronous = slow
        self._rebuild_floor()
        for k in changed:
            self._regroup(k)

    def _extra_state(self) -> dict[str, Any]:
        return {
            "duration": dict(self._duration),
            "asynchronous": sorted(self._asynchronous),
            "since_recompute": self._since_recompute,
        }

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self._duration = {int(k): float(d) for k, d in state["duration"].items()}
        self._asynchronous = {int(k) for k in state["asynchronous"]}
        self._since_recompute = int(state["since_recompute"])
