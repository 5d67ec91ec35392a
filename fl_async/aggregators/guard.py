"""The update guard: an update far larger than the accepted ones is refused before a rule sees it.

docs/algorithms.md, The update guard: with ``n_t`` the L2 norm of an update's floating arrays
and ``M`` the median, over the last ``window`` nodes whose updates were accepted, of each one's
latest accepted norm, an update with ``n_t > factor * M`` is rejected (``"too-large"``) or, in
``"clip"`` mode, scaled down to norm ``factor * M``. The guard acts once ``warmup`` nodes have an
accepted norm. One vote per node: a fast node sending most of the updates does not set the
median alone (it did, with one vote per update, and honest slow nodes with more data, whose
updates are larger, were refused until they left the run). A scaled (``x1000``) or sign-flipped
(``x100``) update, or local training that blew up while staying finite, is caught.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from fl_async.aggregators.kernels import all_finite, squared_norm
from fl_async.aggregators.updates import ClientUpdate, Rejected, check_update
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number

GUARD_FACTOR: Final = 10.0
"""The default ``factor``: an attack is orders of magnitude out of line; an honest update rarely
is ten times the median of the nodes' votes (docs/algorithms.md, The update guard)."""
TOO_LARGE: Final = "too-large"
"""The ``num_rejected`` key of an update the guard refused."""
MODES: Final = ("reject", "clip")
OLD_WINDOW: Final = -1
"""The node a window saved before one vote per node stands for (no stable id is negative)."""


@dataclass(frozen=True)
class Verdict:
    """What the guard says of one update before the rule sees it."""

    norm: float | None
    """The update's norm (None: not measured, the guard is off or the update is malformed)."""
    scale: float = 1.0
    """1: pass it on as it is; below 1: clip it (multiply by ``scale``); 0: reject it."""
    node: int | None = None
    """The node that sent the update, whose vote its norm becomes once the rule accepts it."""

    @property
    def sent(self) -> float | None:
        """The norm of the update as it came, before any clipping (None: not measured)."""
        if self.norm is None or self.scale in (0.0, 1.0):
            return self.norm
        return self.norm / self.scale

    @property
    def refused(self) -> bool:
        """Whether the update is rejected as ``"too-large"``."""
        return self.scale == 0.0


PASS: Final = Verdict(None)


class UpdateGuard:
    """Refuse (or clip) updates whose norm exceeds ``factor`` times the median of recent nodes'.

    Parameters
    ----------
    factor : float or None (default: 10.0)
        The multiple of the median accepted norm above which an update is out of line; None
        or 0 turns the guard off.
    mode : str (default: "reject")
        ``"reject"``: count the update in ``num_rejected["too-large"]``; ``"clip"``: scale it
        down to ``factor`` times the median and pass it on.
    window : int (default: 50)
        How many nodes the median is taken over: those most recently accepted, each with the
        norm of its latest accepted update.
    warmup : int (default: 1)
        Nodes with an accepted norm needed before the guard acts (the first update passes).
    """

    def __init__(self, *, factor: float | None = GUARD_FACTOR, mode: str = "reject",
                 window: int = 50, warmup: int = 1) -> None:  # fmt: skip
        self.factor = _factor(factor)
        self.mode = check_choice("mode", mode, MODES)
        self.window = check_int("window", window, minimum=1)
        self.warmup = check_int("warmup", warmup, minimum=1)
        if self.warmup > self.window:
            raise InvalidArgument(f"warmup must be at most window ({self.window}), got {warmup}")
        self._norms: OrderedDict[int, float] = OrderedDict()
        """Node -> its latest accepted norm, least recently accepted node first."""

    @classmethod
    def of(cls, guard: UpdateGuard | float | None) -> UpdateGuard:
        """``guard`` itself, or a guard with that ``factor`` (None or 0: off)."""
        return guard if isinstance(guard, UpdateGuard) else cls(factor=guard)

    @property
    def active(self) -> bool:
        """Whether the guard is on (a ``factor`` is set)."""
        return self.factor is not None

    def limit(self) -> float | None:
        """The largest norm passed as it is now: ``factor`` times the median of the window
        (None while the guard is off or warming up)."""
        if self.factor is None or len(self._norms) < self.warmup:
            return None
        return self.factor * statistics.median(self._norms.values())

    def check(self, update: ClientUpdate, model: Sequence[np.ndarray]) -> Verdict:
        """Measure ``update`` against the limit. A malformed or non-finite update passes: the
        rule rejects it for what it is (``bad-shape``, ``non-finite``, ...)."""
        if self.factor is None:
            return PASS
        try:
            check_update(update, model, max_staleness=None, base_required=False)
        except Rejected:
            return PASS
        floats = [a for a in update.delta if a.dtype.kind == "f"]
        norm = math.sqrt(squared_norm(floats))  # inf when float32 overflows on finite values
        if math.isnan(norm) or math.isinf(norm) and not all_finite(floats):
            return PASS
        limit, node = self.limit(), update.node_id
        if limit is None or norm <= limit:
            return Verdict(norm, node=node)
        if self.mode == "reject":
            return Verdict(norm, 0.0, node)
        return Verdict(limit, limit / norm, node)

    def accepted(self, verdict: Verdict) -> None:
        """The rule accepted the update ``verdict`` was given for: its norm becomes its node's
        vote, and the node the most recent of the window."""
        if verdict.norm is None:
            return
        self._norms.pop(verdict.node, None)
        self._norms[verdict.node] = verdict.norm
        while len(self._norms) > self.window:
            self._norms.popitem(last=False)

    def reset(self) -> None:
        """Forget every norm (a new run starts)."""
        self._norms.clear()

    def state_dict(self) -> dict[str, Any]:
        """The window: ``[node, norm]`` pairs, least recently accepted node first."""
        return {"norms": [[node, norm] for node, norm in self._norms.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``. A window saved by an older fl-async (plain norms, one per
        update, no nodes) comes back as one vote, its median, of a node no longer heard from."""
        saved = state["norms"]
        if saved and not isinstance(saved[0], list | tuple):
            saved = [[OLD_WINDOW, statistics.median(float(n) for n in saved)]]
        self._norms = OrderedDict((int(n), float(v)) for n, v in saved[-self.window :])

    def hyperparameters(self) -> dict[str, Any]:
        """The guard's settings, for logs and the run's description."""
        return {"factor": self.factor, "mode": self.mode, "window": self.window,
                "warmup": self.warmup}  # fmt: skip

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"UpdateGuard({args})"


def clip(arrays: Sequence[np.ndarray], scale: float) -> list[np.ndarray]:
    """``arrays`` with their floating ones multiplied by ``scale`` (new arrays of the same
    dtype; the others as they are)."""
    return [(a * scale).astype(a.dtype, copy=False) if a.dtype.kind == "f" else a for a in arrays]


def _factor(value: float | None) -> float | None:
    """A checked ``factor``: None for off (None or 0), else a number >= 1."""
    if value is None:
        return None
    check_number("factor", value, minimum=0)
    if value == 0:
        return None
    if value < 1:
        raise InvalidArgument(
            f"factor must be 0 or None (off) or a number >= 1 (a multiple of the median), "
            f"got {value!r}"
        )
    return float(value)
