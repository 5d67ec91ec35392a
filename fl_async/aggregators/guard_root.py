"""The server's reference update (docs/algorithms.md, The update guard): FLTrust's check.

Where the server holds a small root dataset of clean examples, a ``Reference`` trains on it from
an update's base model as a node would, and the guard judges the update by its cosine with that
reference update ``g0`` (Cao et al., FLTrust, NDSS 2021; Fang et al., AFLGuard, ACSAC 2022, for
asynchronous updates): an update with ``cos(g, g0) <= trust`` is refused, and one with
``cos(g, g0) < AGREE`` is down-weighted (``doubted``). ``ReferenceCache`` computes each base
version's reference once.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from fl_async.aggregators.guard_reference import dot
from fl_async.validation import InvalidArgument, check_int

Reference = Callable[[list[np.ndarray], int], Sequence[np.ndarray]]
"""Makes the reference update ``base − trained`` (all of the model's arrays, in order) from a
base model's arrays and its version (the server step it was made at, which seeds the training)."""

TRUST: Final = -0.5
"""The default ``trust``: at or below it an update is refused. Honest updates of non-IID MNIST
and Synthetic nodes reached cosines near -0.3 with the reference (docs/algorithms.md)."""
AGREE: Final = 0.1
"""Below this cosine an update is in doubt: down-weighted to at most ``DOUBT * M``, less the
nearer it is to ``trust``. A third to three quarters of honest non-IID updates measured lie
below it."""
DOUBT: Final = 0.25
"""The most an update in doubt may count, in median norms ``M``."""
KEPT: Final = 16
"""Base versions whose references are kept: the tasks in flight start from a few recent ones."""


class ReferenceCache:
    """Each base version's reference update (its floating arrays), computed once by
    ``reference``; the ``keep`` most recently used are kept."""

    def __init__(self, reference: Reference, *, keep: int = KEPT) -> None:
        if not callable(reference):
            raise InvalidArgument(
                f"reference must be a callable (base arrays, version) -> update arrays, "
                f"got {reference!r}"
            )
        self.reference = reference
        self.keep = check_int("keep", keep, minimum=1)
        self._made: OrderedDict[int, tuple[list[np.ndarray], float]] = OrderedDict()
        self.computed = 0
        """References computed so far (a cache miss each)."""

    def get(self, base: Sequence[np.ndarray], version: int) -> tuple[list[np.ndarray], float]:
        """The reference's floating arrays for the model ``base`` of server step ``version``,
        and its norm."""
        if version in self._made:
            self._made.move_to_end(version)
            return self._made[version]
        arrays = list(self.reference([np.asarray(a) for a in base], version))
        if len(arrays) != len(base):
            raise ValueError(
                f"the reference update has {len(arrays)} arrays, the model {len(base)}"
            )
        floats = [
            np.asarray(a, dtype=np.float32)
            for a, b in zip(arrays, base, strict=True)
            if np.asarray(b).dtype.kind == "f"
        ]
        made = (floats, math.sqrt(dot(floats, floats)))
        self._made[version] = made
        self.computed += 1
        while len(self._made) > self.keep:
            self._made.popitem(last=False)
        return made

    def cosine(
        self, floats: Sequence[np.ndarray], norm: float, base: Sequence[np.ndarray], version: int
    ) -> float | None:
        """``cos(g, g0)`` of an update's floating arrays (norm ``norm``) with the reference of
        its base; None when either is zero or not finite (nothing to judge a direction by)."""
        reference, size = self.get(base, version)
        if not (norm > 0 and size > 0 and math.isfinite(norm * size)):
            return None
        cosine = dot(floats, reference) / (norm * size)
        return cosine if math.isfinite(cosine) else None

    def clear(self) -> None:
        """Forget every reference (a new run starts from other models)."""
        self._made.clear()


def doubted(cosine: float, trust: float) -> float:
    """The most an update of this cosine with the reference counts, in median norms ``M``:
    ``DOUBT * (cosine - trust) / (AGREE - trust)`` below ``AGREE``, else unbounded (``inf``)."""
    if cosine >= AGREE or trust >= AGREE:
        return math.inf
    return DOUBT * max(0.0, cosine - trust) / (AGREE - trust)
