"""OD-SGD's server rule in plain numpy (docs/algorithms.md, OD-SGD): SSGD's step, one buffer
per iteration.

An update of iteration ``i`` is held for the step being filled (``i = v``) or in iteration
``i``'s own buffer (``i > v``); ``i < v`` is too stale. ``flush`` steps with the held updates
as SSGD does, and iteration ``v + 1``'s buffer becomes the step's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_async.aggregators.reference import State, ssgd
from fl_async.aggregators.updates import ClientUpdate, Rejected


def init(params: Sequence[np.ndarray]) -> State:
    """SSGD's state, and the buffers of later iterations (``future``)."""
    return {**ssgd.init(params), "future": {}}


def update(state: State, u: ClientUpdate) -> tuple[State, str]:
    """Hold one update in its iteration's buffer."""
    i, v = u.iteration, state["v"]
    if i is None:
        raise Rejected("missing-iteration")
    if i < v:
        raise Rejected("too-stale")
    if i == v:
        return {**state, "held": ssgd.hold(state["held"], u)}, "held"
    future = {**state["future"], i: ssgd.hold(state["future"].get(i, {}), u)}
    return {**state, "future": future}, "held"


def flush(state: State, *, lr: float = 1.0) -> State:
    """SSGD's step; the next iteration's buffer becomes the held set."""
    new = ssgd.flush(state, lr=lr)
    if new is state:
        return state
    future = dict(state["future"])
    return {**new, "held": future.pop(new["v"], {}), "future": future}
