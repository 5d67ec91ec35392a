"""The update guard: no update reaches a rule unchecked, the first included.

docs/algorithms.md, The update guard. With ``n`` the L2 norm of an update's floating arrays and
``M`` the median of the nodes' votes (each node's latest arriving norm, over the last ``window``
nodes heard from), an update is:

- held, until votes from ``quorum`` distinct nodes (fewer when the run has fewer) have arrived,
  so that no single first update, huge, zero or tiny, sets ``M``;
- refused as ``"no-update"`` when ``n <= FLOOR * M`` (a zero update always): it does not vote;
- clipped to norm ``factor * M`` when larger, refused as ``"too-large"`` when over
  ``max(REFUSE, factor) * M`` (mode ``"reject"``: refused when over ``factor * M``);
- refused as ``"wrong-direction"`` when its cosine with the server's reference update of its
  base (``reference``: ``guard_root``) is at most ``trust``, down-weighted when in doubt; without
  a reference, when it pulls against the recent aggregate direction ``m``
  (``guard_reference.Direction``) by more than ``direction * M``, once ``m`` is coherent; its
  node is then clipped to ``M`` until one of its updates passes a direction judgement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from fl_async.aggregators.guard_reference import (
    Direction,
    SoleNode,
    Votes,
    cosine_with_others,
    floats,
    guard_factor,
    scaled,
    summed,
)
from fl_async.aggregators.guard_root import TRUST, Reference, ReferenceCache, doubted
from fl_async.aggregators.kernels import all_finite, squared_norm
from fl_async.aggregators.updates import ClientUpdate, Rejected, check_update
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number

GUARD_FACTOR: Final = 3.0
"""The default ``factor``: honest updates of non-IID nodes differ in size by a few times; an
update clipped to three times the median moves the model at most three honest updates' worth."""
QUORUM: Final = 3
"""The default ``quorum``: the median of three votes is set by no single node."""
DIRECTION: Final = 1.0
"""The default ``direction``: an update may point against the aggregate direction by at most
one median update's length."""
REFUSE: Final = 30.0
"""An update over ``max(REFUSE, factor)`` times ``M`` is refused, not clipped: clipped, a
scaled update would still count ``factor`` honest updates' worth in its node's direction."""
FLOOR: Final = 1e-3
"""An update at most this fraction of ``M`` carries no update (``"no-update"``)."""
TOO_LARGE: Final = "too-large"
"""The ``num_rejected`` key of an update refused for its size (mode ``"reject"``)."""
NO_UPDATE: Final = "no-update"
"""The ``num_rejected`` key of a zero or near-zero update."""
WRONG_DIRECTION: Final = "wrong-direction"
"""The ``num_rejected`` key of an update pointing against the aggregate direction."""
REFUSALS: Final = (TOO_LARGE, NO_UPDATE, WRONG_DIRECTION)
"""Every ``num_rejected`` key of the guard's."""
MODES: Final = ("clip", "reject")


@dataclass(frozen=True)
class Verdict:
    """What the guard says of one update before the rule sees it."""

    norm: float | None
    """The update's norm as it came (None: not measured: the guard is off, or the update is
    malformed or non-finite and left for the rule to reject)."""
    scale: float = 1.0
    """What its floating arrays are multiplied by before the rule sees them (below 1: clipped)."""
    reason: str | None = None
    """Why it is refused (a ``REFUSALS`` key), or None."""
    node: int | None = None
    """The node that sent it."""
    hold: bool = False
    """Held until the votes of ``quorum`` nodes arrived (``UpdateGuard.open``)."""
    median: float | None = None
    """``M`` when it was judged: it caps the update's weight in the aggregate direction."""
    cosine: float | None = None
    """Its cosine with the reference update of its base (None: no reference judged it)."""
    doubted: bool = False
    """Its ``scale`` down-weights it for a cosine in doubt (``guard_root.doubted``), not size."""

    @property
    def refused(self) -> bool:
        """Whether the guard refuses the update (``reason`` says why)."""
        return self.reason is not None


PASS: Final = Verdict(None)


class UpdateGuard:
    """Hold, refuse or clip updates by their size and direction against several nodes' votes.

    Parameters
    ----------
    factor : float or None (default: 3.0)
        The multiple of ``M`` an update is clipped to; None or 0 turns the guard off.
    mode : str (default: "clip")
        ``"clip"``: scale a larger update down to ``factor * M`` (refuse it, as
        ``num_rejected["too-large"]``, above ``max(30, factor) * M``); ``"reject"``: refuse it.
    window : int (default: 50)
        How many nodes ``M`` is taken over: those most recently heard from, one vote each.
    quorum : int (default: 3)
        Distinct nodes whose votes must have arrived before any update is applied (at most the
        number of nodes at the start).
    direction : float (default: 1.0)
        Without a ``reference``: refuse an update whose length against the coherent aggregate
        direction (``-cos`` times its norm, clipped) exceeds this multiple of ``M``; 0: off.
    reference : callable, optional
        ``(base arrays, version) -> reference update``: the server's own update from an
        update's base (trained on a root dataset, as FLTrust); each version's made once.
    trust : float (default: -0.5)
        With a ``reference``: refuse an update whose cosine with it is at most ``trust``; one
        below ``AGREE`` is down-weighted (``guard_root.doubted``).
    """

    def __init__(
        self,
        *,
        factor: float | None = GUARD_FACTOR,
        mode: str = "clip",
        window: int = 50,
        quorum: int = QUORUM,
        direction: float = DIRECTION,
        reference: Reference | None = None,
        trust: float = TRUST,
    ) -> None:
        self.factor = guard_factor(factor)
        self.mode = check_choice("mode", mode, MODES)
        self.window = check_int("window", window, minimum=1)
        self.quorum = check_int("quorum", quorum, minimum=1)
        if self.quorum > self.window:
            raise InvalidArgument(f"quorum must be at most window ({self.window}), got {quorum}")
        self.direction = float(check_number("direction", direction, minimum=0))
        self.root = None if reference is None else ReferenceCache(reference)
        self.trust = float(check_number("trust", trust, minimum=-1, maximum=1))
        self.reset()

    @classmethod
    def of(cls, guard: UpdateGuard | float | None) -> UpdateGuard:
        """``guard`` itself, or a guard with that ``factor`` (None or 0: off)."""
        return guard if isinstance(guard, UpdateGuard) else cls(factor=guard)

    @property
    def active(self) -> bool:
        """Whether the guard is on (a ``factor`` is set)."""
        return self.factor is not None

    @property
    def holding(self) -> bool:
        """Whether updates are held: the guard is on and its quorum has not opened it yet."""
        return self.factor is not None and not self._opened

    def reset(self) -> None:
        """Forget every vote and direction, and hold again (a new run starts)."""
        self._votes = Votes(self.window)
        self._direction = Direction(self.window)
        self._sole = SoleNode()
        self._suspects: set[int] = set()
        """Nodes whose latest judged direction was refused: clipped to ``M`` until one passes."""
        self._opened = False
        self._needed = self.quorum
        self._heard: set[int] = set()
        self._queued: list[Verdict] = []
        """The verdicts given at the opening to updates not applied yet, in order."""
        if self.root is not None:
            self.root.clear()  # versions start over from another model

    def begin(self, num_nodes: int) -> None:
        """A run starts with ``num_nodes`` nodes: the quorum is at most that many."""
        self._needed = max(1, min(self.quorum, num_nodes))

    def limit(self) -> float | None:
        """``factor * M`` (None while the guard is off or holding)."""
        median = self._votes.median()
        if self.factor is None or not self._opened or median is None:
            return None
        return self.factor * median

    def measure(self, update: ClientUpdate, model: Sequence[np.ndarray]) -> float | None:
        """``n``, the norm of ``update``'s floating arrays; None when the guard is off or the
        update is malformed or non-finite (the rule rejects it for what it is)."""
        if self.factor is None:
            return None
        try:
            check_update(update, model, max_staleness=None, base_required=False)
        except Rejected:
            return None
        arrays = floats(update.delta)
        norm = math.sqrt(squared_norm(arrays))  # inf when float32 overflows on finite values
        if math.isnan(norm) or math.isinf(norm) and not all_finite(arrays):
            return None
        return norm

    def check(
        self,
        update: ClientUpdate,
        model: Sequence[np.ndarray],
        base: tuple[Sequence[np.ndarray], int] | None = None,
    ) -> Verdict:
        """Judge ``update`` as it arrives, made from ``base`` (its model and version; None:
        not known): its norm votes, then it is held (quorum not met), refused, clipped or
        passed."""
        norm = self.measure(update, model)
        node = update.node_id
        if norm is None:
            return PASS
        if norm == 0:
            return Verdict(norm, 0.0, NO_UPDATE, node)
        root = None
        if self.root is not None and base is not None:  # judged against its own base's
            root = self.root.cosine(floats(update.delta), norm, *base)
        if not self._opened:
            return Verdict(norm, node=node, hold=True, cosine=root)
        median = self._votes.median()
        if median is not None and norm <= FLOOR * median:
            return Verdict(norm, 0.0, NO_UPDATE, node, median=median)
        self._votes.cast(node, norm)
        median = self._votes.median()
        if root is not None:
            return self._judge(norm, node, median, None, root)
        cosine = self._direction.cosine(floats(update.delta), norm, median, len(self._votes))
        return self._judge(norm, node, median, cosine)

    def heard(self, node: int) -> None:
        """``node`` answered while updates are held (a failure counts: its vote is not coming)."""
        if not self._opened:
            self._heard.add(node)

    def ready(self, held: Iterable[int], may_vote: Iterable[int]) -> bool:
        """Whether to open with the ``held`` updates' nodes: they are the quorum, or every node
        that may still vote (``may_vote``) has been heard from."""
        return len(set(held)) >= self._needed or all(n in self._heard for n in may_vote)

    def open(
        self,
        held: Sequence[tuple[ClientUpdate, float]],
        roots: Sequence[float | None] | None = None,
    ) -> list[Verdict]:
        """Open the guard with the held ``(update, norm)`` pairs, in arrival order: they vote,
        and each is judged against ``M`` and its held verdict's cosine with the reference
        (``roots``), else the mean of the others' (capped) directions."""
        roots = list(roots) if roots is not None else [None] * len(held)
        self._opened, self._heard = True, set()
        first = np.median([n for _, n in held]) if held else 0.0
        voters = [(u, n) for u, n in held if n > FLOOR * first]
        for update, norm in voters:
            self._votes.cast(update.node_id, norm)
        median = self._votes.median() or 0.0
        capped = [scaled(floats(u.delta), min(1.0, median / n)) for u, n in voters]
        total = summed(capped)
        verdicts, k = [], 0
        for (update, norm), root in zip(held, roots, strict=True):
            if norm <= FLOOR * first:
                verdicts.append(Verdict(norm, 0.0, NO_UPDATE, update.node_id, median=median))
                continue
            mine, k = capped[k], k + 1
            cosine = None  # judged by its reference where it has one, not by the aggregate
            if root is None:
                delta = floats(update.delta)
                cosine = cosine_with_others(delta, norm, total, mine, len(voters), median)
            verdicts.append(self._judge(norm, update.node_id, median, cosine, root))
        self._queued = list(verdicts)
        return verdicts

    @property
    def queued(self) -> int:
        """Updates judged at the opening and not applied yet."""
        return len(self._queued)

    def drop_queued(self) -> None:
        """Forget the verdicts of the opening not used yet (their updates will not come)."""
        self._queued = []

    def take_queued(self, node: int) -> Verdict | None:
        """The verdict given at the opening to ``node``'s update, if it is the next one not
        applied yet (a resumed run gets the update again and must judge it the same)."""
        if self._queued and self._queued[0].node == node:
            return self._queued.pop(0)
        return None

    def accepted(self, verdict: Verdict, delta: Sequence[np.ndarray]) -> None:
        """The rule accepted the update ``verdict`` was given for, as ``delta`` (clipped where
        it was): it joins the aggregate direction with weight ``min(1, M / |delta|)``."""
        if verdict.norm is None or verdict.median is None or verdict.scale < 1:
            return  # a clipped update's direction is not evidence
        cap = min(1.0, verdict.median / (verdict.norm * verdict.scale))
        self._direction.add(floats(delta), verdict.node, cap, len(self._votes))

    def note(self, node: int, *, accepted: bool, refused: bool) -> None:
        """Count one decided reply of ``node`` for the one-node stop (``one_node``)."""
        if self.factor is not None:
            self._sole.note(node, accepted=accepted, refused=refused)

    def one_node(self, patience: int) -> str:
        """Why the run should stop as ``"one-node"`` ("" to go on): for ``patience`` decided
        replies or more only one node's updates were accepted, the guard refusing the others'."""
        sole = self._sole
        if not sole.stuck(patience):
            return ""
        return (
            f"for {sole.stretch} replies only the updates of the node with stable id "
            f"{sole.node} were accepted; the update guard refused {sole.refused} of the "
            "others' (no-update, too-large or wrong-direction)"
        )

    def state_dict(self) -> dict[str, Any]:
        """The votes, the aggregate direction, the one-node stretch and the quorum's state."""
        return {
            "votes": self._votes.state(),
            "direction": self._direction.state(),
            "sole": self._sole.state(),
            "opened": self._opened,
            "needed": self._needed,
            "heard": sorted(self._heard),
            "suspects": sorted(self._suspects),
            "queued": [
                [v.node, v.norm, v.scale, v.reason, v.median, v.cosine, v.doubted]
                for v in self._queued
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``. A window saved by an older fl-async (``"norms"``: the
        accepted norms) comes back as the votes of an open guard with no direction yet."""
        self.reset()
        if "norms" in state and "votes" not in state:
            self._votes.load(state["norms"])
            self._opened = bool(state["norms"])
            return
        missing = {"votes", "direction", "sole", "opened", "needed", "heard", "suspects", "queued"}
        missing -= set(state)
        if missing:
            raise ValueError(f"the update guard's saved state lacks {sorted(missing)}")
        self._votes.load(state["votes"])
        self._direction.load(state["direction"])
        self._sole.load(state["sole"])
        self._opened, self._needed = bool(state["opened"]), int(state["needed"])
        self._heard = {int(n) for n in state["heard"]}
        self._suspects = {int(n) for n in state["suspects"]}
        # Verdicts saved before the root set's reference have five fields: no cosine, no doubt.
        saved = ([*v, None, False] if len(v) == 5 else v for v in state["queued"])
        self._queued = [
            Verdict(norm, scale, reason, node, median=median, cosine=cosine, doubted=bool(doubt))
            for node, norm, scale, reason, median, cosine, doubt in saved
        ]

    def hyperparameters(self) -> dict[str, Any]:
        """The guard's settings, for logs and the run's description."""
        found = {"factor": self.factor, "mode": self.mode, "window": self.window}
        found.update(quorum=self.quorum, direction=self.direction)
        if self.root is not None:
            found.update(reference=self.root.reference, trust=self.trust)
        return found

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"UpdateGuard({args})"

    def _judge(
        self, norm: float, node: int, median: float, cosine: float | None, root: float | None = None
    ) -> Verdict:
        """Refuse an update at most ``trust`` in cosine with the reference (``root``), or,
        without one, against the aggregate by more than ``direction * M``; clip it above
        ``factor * M`` (``M`` for a suspect node), refuse it above ``max(REFUSE, factor) * M``
        (``"reject"``: above ``factor * M``)."""
        if root is not None:
            if root <= self.trust:
                return Verdict(norm, 0.0, WRONG_DIRECTION, node, median=median, cosine=root)
            verdict = replace(self._sized(norm, node, median, self.factor * median), cosine=root)
            cap = doubted(root, self.trust) * median
            if verdict.refused or norm * verdict.scale <= cap:
                return verdict
            return replace(verdict, scale=cap / norm, doubted=True)
        limit = (1.0 if node in self._suspects else self.factor) * median
        against = 0.0 if cosine is None else -cosine * min(norm, limit)
        if self.direction and against > self.direction * median:
            self._suspects.add(node)
            return Verdict(norm, 0.0, WRONG_DIRECTION, node, median=median)
        if cosine is not None:
            self._suspects.discard(node)  # judged by a coherent aggregate, and passed
            limit = self.factor * median
        return self._sized(norm, node, median, limit)

    def _sized(self, norm: float, node: int, median: float, limit: float) -> Verdict:
        """Pass an update of norm at most ``limit``, else clip or refuse it (``mode``)."""
        if norm <= limit:
            return Verdict(norm, node=node, median=median)
        if self.mode == "reject" or norm > max(REFUSE, self.factor) * median:
            return Verdict(norm, 0.0, TOO_LARGE, node, median=median)
        return Verdict(norm, limit / norm, node=node, median=median)
