"""What arrives at an aggregator: a ``ClientUpdate``, and the checks that reject one.

A rejection is raised as ``Rejected(reason)``; the reason is the ``num_rejected`` key
(docs/algorithms.md, The aggregator interface).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fl_async.aggregators.kernels import all_finite, squared_norm


@dataclass(frozen=True, kw_only=True)
class ClientUpdate:
    """One arriving update: node ``node_id`` sends pseudo-gradient ``delta = base - trained``."""

    node_id: int
    delta: Sequence[np.ndarray]
    base: Sequence[np.ndarray] | None = None
    staleness: int = 0
    num_examples: int = 1
    iteration: int | None = None
    """The node's iteration index (its count of finished tasks); read by OD-SGD only."""


class Rejected(Exception):
    """Raised inside a rule's step to reject the update; ``reason`` is the counter's key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_count(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0


def check_update(
    update: ClientUpdate,
    model: Sequence[np.ndarray],
    *,
    max_staleness: int | None,
    base_required: bool,
) -> None:
    """Raise ``Rejected`` unless ``update`` fits ``model``: its staleness and example count,
    its base (``base_required``), and its arrays' number, shapes and kinds of dtype."""
    if not _is_count(update.staleness):
        raise Rejected("bad-staleness")
    if max_staleness is not None and update.staleness > max_staleness:
        raise Rejected("too-stale")
    if not _is_count(update.num_examples):
        raise Rejected("bad-num-examples")
    if update.base is None and base_required:
        raise Rejected("missing-base")
    for arrays in (update.delta, update.base):
        if arrays is None:
            continue
        if len(arrays) != len(model):
            raise Rejected("bad-shape")
        for a, p in zip(arrays, model, strict=True):
            if not isinstance(a, np.ndarray) or a.shape != p.shape:
                raise Rejected("bad-shape")
            if (a.dtype.kind == "f") != (p.dtype.kind == "f") or a.dtype.kind not in "fiu":
                raise Rejected("bad-dtype")


def norm_bound(arrays: Sequence[np.ndarray]) -> float | None:
    """``sqrt(sum a**2)``, which bounds every ``|a_i|``; None when that float32 sum overflows on
    finite values. Raise ``Rejected("non-finite")`` on NaN/Inf."""
    size = squared_norm(arrays)
    if math.isfinite(size):
        return math.sqrt(size)
    if all_finite(arrays):  # the dot products overflowed, not the data
        return None
    raise Rejected("non-finite")
