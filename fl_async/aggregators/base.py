"""The aggregator interface shared by every rule (docs/algorithms.md, The aggregator interface).

An aggregator owns the global model ``w`` and the rule's accumulators. ``apply`` validates one
client update completely before it touches any state; a step that cannot be proven finite is
computed into scratch twins of the state, checked, and only then published, so a rejected update
leaves everything unchanged.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, get_args

import numpy as np

from fl_async.aggregators.kernels import Arrays, all_finite, probe, run_chunked
from fl_async.aggregators.staleness import Constant, StalenessFn, resolve_staleness
from fl_async.aggregators.updates import ClientUpdate, Rejected, check_update, norm_bound
from fl_async.validation import InvalidArgument, check_int

logger = logging.getLogger(__name__)

Status = Literal["applied", "held", "stepped", "rejected"]
"""What ``apply`` did with one update (``Outcome.status``)."""
APPLIED: Final = "applied"
"""The update made a server step by itself."""
HELD: Final = "held"
"""The update is kept for a later step: a buffer or a barrier."""
STEPPED: Final = "stepped"
"""The update completed a buffer or barrier, and the step was taken."""
REJECTED: Final = "rejected"
"""The update was refused; ``Outcome.reason`` is its ``num_rejected`` key."""
STATUSES: Final = get_args(Status)

MODEL: Final = "w"
"""The model's floating arrays, by name among a rule's state (``_live``, ``_twins``)."""


@dataclass(frozen=True)
class Outcome:
    """What ``apply`` did with one update. It has no truth value of its own: ask ``accepted``
    or ``stepped``."""

    status: Status
    reason: str | None = None
    """The rejection reason (the ``num_rejected`` key) when ``status`` is ``"rejected"``."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InvalidArgument(f"status must be one of {STATUSES}, got {self.status!r}")
        if (self.reason is not None) != (self.status == REJECTED):
            raise InvalidArgument(f"a reason goes with status 'rejected' only, got {self!r}")

    @property
    def accepted(self) -> bool:
        """Whether the update was taken (applied, held or stepped)."""
        return self.status != REJECTED

    @property
    def stepped(self) -> bool:
        """Whether a server step was taken (``version`` grew by one)."""
        return self.status in (APPLIED, STEPPED)


class Aggregator(abc.ABC):
    """Base of every rule: validation, rejection counting, versioning and state handling.

    Subclasses implement ``_step`` on the floating arrays only; non-floating arrays (BatchNorm's
    ``num_batches_tracked``) are not aggregated and take the latest accepted value at each step.
    Model-shaped accumulators are registered by name in ``_init_state`` (``self._acc``), so that
    one mechanism (``_advance``, ``_twins``, ``_publish``) runs a step in place or into scratch.
    """

    name: ClassVar[str]
    needs_base: ClassVar[bool] = False
    """Whether the rule reads the base model's values (FedAsync, DC-ASGD)."""
    default_staleness: ClassVar[StalenessFn] = Constant()

    def __init__(
        self, *, staleness: StalenessFn | str | None = None, max_staleness: int | None = None
    ) -> None:
        self.staleness = resolve_staleness(staleness, type(self).default_staleness)
        self.max_staleness = check_int("max_staleness", max_staleness, minimum=0, allow_none=True)
        self._params: Arrays | None = None
        self._version = 0
        self.num_rejected: dict[str, int] = {}

    # ----------------------------------------------------------------------------- public API
    def init(self, params: Sequence[np.ndarray]) -> None:
        """Take a copy of ``params`` as the initial global model (floating arrays as float32)."""
        model = []
        for i, p in enumerate(params):
            a = np.asarray(p)
            if a.dtype.kind not in "fiu":
                raise InvalidArgument(f"params[{i}] has dtype {a.dtype}; allowed: float, int, uint")
            dtype = np.float32 if a.dtype.kind == "f" else a.dtype
            model.append(np.array(a, dtype=dtype, order="C", copy=True))
        self._adopt(model)
        self._version = 0
        self.num_rejected = {}
        self._init_state()

    @property
    def params(self) -> Arrays:
        """The current global model: the live arrays, replaced at each step; copy what you keep."""
        return self._model()

    @property
    def reads_base(self) -> bool:
        """Whether ``apply`` reads an update's base: the rule uses it (``needs_base``), or the
        model has non-floating arrays, whose new value is ``base - delta``. A caller may leave
        the base out otherwise, and save the pass that checks it."""
        return self.needs_base or bool(self._other)

    @property
    def version(self) -> int:
        """The number of server steps taken so far."""
        return self._version

    def apply(self, update: ClientUpdate) -> Outcome:
        """Apply one client update and say what became of it.

        A rejected update leaves all state but ``num_rejected`` unchanged and is logged with its
        reason.
        """
        model = self._model()
        try:
            status = self._admit(update, model)
        except Rejected as rejection:
            self._reject(rejection.reason, update.node_id, update.staleness)
            return Outcome(REJECTED, rejection.reason)
        self._take_other(update)
        if status != HELD:
            self._finish_step()
        return Outcome(status)

    def refuse(self, update: ClientUpdate, reason: str) -> Outcome:
        """Count and log ``update`` as rejected for ``reason`` without applying it: the caller
        refused it before the rule saw it (the strategy's update guard)."""
        self._reject(reason, update.node_id, update.staleness)
        return Outcome(REJECTED, reason)

    @property
    def held(self) -> int:
        """Updates held for a step that waits for a barrier (``flush``): 0 for rules that step by
        themselves (FedBuff's buffer steps when full; see ``FedBuff.count``)."""
        return 0

    def joins_step(self, base_version: int, iteration: int) -> bool:
        """Whether a task dispatched at global version ``base_version``, as its node's
        ``iteration``-th task, would contribute to the barrier step now being filled."""
        return False

    def flush(self) -> bool:
        """Take the barrier step with the updates held now (once no more are owed); return
        whether a step was taken. Rules without a barrier hold nothing: False."""
        return False

    def forget(self, node_id: int) -> None:  # noqa: B027 (a hook: most rules hold nothing)
        """A node left the active set: drop whatever the rule holds of it (default: nothing)."""

    def state_dict(self) -> dict[str, Any]:
        """Copies of everything needed to resume bit for bit (no callables)."""
        model = self._model()
        return {
            "name": self.name,
            "version": self._version,
            "num_rejected": dict(self.num_rejected),
            "params": [p.copy() for p in model],
            "pending": {i: a.copy() for i, a in self._pending.items()},
            "state": self._rule_state(),
            "hyperparameters": self.hyperparameters(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` (also on a freshly constructed aggregator)."""
        missing = {"name", "version", "num_rejected", "params", "pending", "state"} - set(state)
        if missing:
            raise ValueError(f"state_dict is missing keys {sorted(missing)}")
        if state["name"] != self.name:
            raise ValueError(f"state_dict is for {state['name']!r}, not {self.name!r}")
        self._adopt([np.array(p, copy=True) for p in state["params"]])
        self._version = int(state["version"])
        self.num_rejected = dict(state["num_rejected"])
        self._pending = {int(i): np.array(a, copy=True) for i, a in state["pending"].items()}
        self._load_rule_state(state["state"])

    def hyperparameters(self) -> dict[str, Any]:
        """The rule's hyperparameters, for logs and checkpoints."""
        return {"staleness": repr(self.staleness), "max_staleness": self.max_staleness}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"

    # ---------------------------------------------------------------------- for subclasses
    @abc.abstractmethod
    def _init_state(self) -> None:
        """Create the rule's accumulators for the model just adopted."""

    @abc.abstractmethod
    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        """Apply a validated update to the floating arrays; return ``APPLIED``, ``HELD`` or
        ``STEPPED``.

        ``delta`` and ``base`` hold the floating arrays only, as float32. The rule checks the
        delta, and the base if it reads it (``needs_base``); any other base was checked finite.
        Raise ``Rejected`` before changing any state.
        """

    def _rule_state(self) -> dict[str, Any]:
        """Copies of the rule's accumulators."""
        return {}

    def _load_rule_state(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Restore the rule's accumulators from ``_rule_state()``."""

    def _floats(self) -> Arrays:
        """The floating arrays of the current model, in order."""
        model = self._model()
        return [model[i] for i in self._float]

    def _zeros(self) -> Arrays:
        """A new zero array per floating parameter (for accumulators)."""
        return [np.zeros_like(self._params[i]) for i in self._float]

    def _live(self, *names: str) -> list[Arrays]:
        """The current arrays of the named state (``MODEL`` or a key of ``self._acc``)."""
        return [self._floats() if name == MODEL else self._acc[name] for name in names]

    def _twins(self, *names: str) -> list[Arrays]:
        """A scratch twin per name, allocated once and reused, to compute checked state into."""
        for name in names:
            if name not in self._spare:
                self._spare[name] = self._zeros()
        return [self._spare[name] for name in names]

    def _advance(
        self,
        kernel: Callable[..., float],
        names: Sequence[str],
        inputs: Sequence[Arrays],
        *,
        delta: Arrays,
        base: Arrays | None,
        in_place: bool = False,
        scratch: int = 0,
    ) -> None:
        """Run the rule's chunk ``kernel`` on a (new, old) pair of arrays per name, then
        ``inputs``, then ``scratch`` chunk buffers.

        ``in_place`` (the running bounds prove the step finite): each pair is (old, old), and the
        kernel need not probe. Otherwise the new state goes to the twins and is published.
        """
        old = self._live(*names)
        new = old if in_place else self._twins(*names)
        pairs = [arrays for pair in zip(new, old, strict=True) for arrays in pair]
        total = run_chunked(kernel, *pairs, *inputs, scratch=scratch)
        if not in_place:
            self._publish(total, delta, base, *names)

    def _publish(self, total: float, delta: Arrays, base: Arrays | None, *names: str) -> None:
        """Make the twins of ``names`` the state, the old arrays becoming the twins, once they
        are checked finite; otherwise raise ``Rejected``.

        ``total`` sums ``probe()`` of output chunks. NaN/Inf in the delta (or a base the rule
        reads) always reaches an output, and so does a non-finite accumulator that enters the
        model through a finite factor; so a probe per chunk, taken while it is in cache, checks
        inputs and overflow at once. Rules probe the model and each accumulator that does not
        reach it. A non-finite total is confirmed element-wise, since a dot product can overflow
        on finite data.
        """
        if not self._twins_finite(total, *names):
            raise Rejected(self._blame(delta, base))
        self._swap(*names)

    def _twins_finite(self, total: float, *names: str) -> bool:
        """Whether the twins of ``names`` are finite, given ``total``, the sum of their probes."""
        return math.isfinite(total) or all(all_finite(t) for t in self._twins(*names))

    def _swap(self, *names: str) -> None:
        """Exchange the named state with its twins."""
        for name in names:
            twin = self._spare[name]
            if name == MODEL:
                for j, i in enumerate(self._float):
                    self._params[i], twin[j] = twin[j], self._params[i]
            else:
                self._spare[name], self._acc[name] = self._acc[name], twin

    def _release_twin(self, name: str, replacement: Arrays | None) -> None:
        """The rule keeps the twin of ``name`` as state of its own (GSGM's new ``G[k]``): the
        arrays ``replacement`` become the twin, or a new twin is made when next asked."""
        del self._spare[name]
        if replacement is not None:
            self._spare[name] = replacement

    def _checked_copy(
        self, free: list[Arrays], delta: Arrays, base: Arrays | None, weight: float | None = None
    ) -> Arrays:
        """A copy of ``delta`` (times ``weight`` when given) in a slot reused from ``free`` (or a
        new one), checked finite; when it is not, the slot goes back to ``free`` and the update
        is ``Rejected``."""
        slot = free.pop() if free else self._zeros()

        def kernel(s: np.ndarray, d: np.ndarray) -> float:
            if weight is None:
                np.copyto(s, d)
            else:
                np.multiply(d, weight, out=s)
            return probe(s)

        total = run_chunked(kernel, slot, delta)
        if not (math.isfinite(total) or all_finite(slot)):
            free.append(slot)
            raise Rejected(self._blame(delta, base))
        return slot

    @staticmethod
    def _blame(delta: Arrays, base: Arrays | None) -> str:
        """Why a non-finite result is rejected: NaN/Inf in the update, or else an overflow."""
        inputs = all_finite(delta) and (base is None or all_finite(base))
        return "overflow" if inputs else "non-finite"

    @staticmethod
    def _copy_arrays(arrays: Sequence[np.ndarray]) -> Arrays:
        return [np.array(a, dtype=np.float32, copy=True) for a in arrays]

    def _reject(self, reason: str, node_id: int, staleness: int) -> None:
        """Count and log one rejected update."""
        self.num_rejected[reason] = self.num_rejected.get(reason, 0) + 1
        logger.warning(
            "%s rejected an update from node %s (staleness %s): %s",
            self.name,
            node_id,
            staleness,
            reason,
        )

    def _finish_step(self) -> None:
        """Count a server step; non-floating arrays take their latest accepted values."""
        for i, value in self._pending.items():
            np.copyto(self._params[i], value)
        self._pending = {}
        self._version += 1

    # ------------------------------------------------------------------------- internals
    def _model(self) -> Arrays:
        if self._params is None:
            raise RuntimeError(f"{type(self).__name__}.init(params) must be called first")
        return self._params

    def _adopt(self, model: Arrays) -> None:
        self._params = model
        self._float = [i for i, p in enumerate(model) if p.dtype.kind == "f"]
        self._other = [i for i, p in enumerate(model) if p.dtype.kind != "f"]
        self._acc: dict[str, Arrays] = {}
        self._spare: dict[str, Arrays] = {}
        self._pending: dict[int, np.ndarray] = {}

    def _admit(self, update: ClientUpdate, model: Arrays) -> Status:
        """Validate ``update`` completely, then run the rule's step; raise ``Rejected``."""
        check_update(
            update,
            model,
            max_staleness=self.max_staleness,
            base_required=self.reads_base,
        )
        weight = float(self.staleness(int(update.staleness)))
        if not math.isfinite(weight) or weight < 0:
            raise Rejected("bad-staleness-weight")
        delta = [np.asarray(update.delta[i], dtype=np.float32) for i in self._float]
        base = None
        if update.base is not None:
            base = [np.asarray(update.base[i], dtype=np.float32) for i in self._float]
            if not self.needs_base:  # a rule that reads the base checks it in its own passes
                norm_bound(base)
        # Non-finite results are detected and rejected: numpy need not warn.
        with np.errstate(all="ignore"):
            return self._step(update, delta, base, weight)

    def _take_other(self, update: ClientUpdate) -> None:
        # Non-floating arrays carry the node's trained value, base - delta, exactly.
        for i in self._other:
            value = np.subtract(update.base[i], update.delta[i])
            self._pending[i] = np.array(value, dtype=self._params[i].dtype)
