"""The aggregator interface shared by every rule (ALGORITHMS.md, "The aggregator interface").

An aggregator owns the global model ``w`` and the rule's accumulators. ``apply`` validates one
client update completely before it touches any state, computes the new state into scratch arrays,
checks it is finite, and only then swaps it in, so a rejected update leaves everything unchanged.
"""

from __future__ import annotations

import abc
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fl_async.aggregators.staleness import Constant, StalenessFn, resolve_staleness

logger = logging.getLogger(__name__)

Arrays = list[np.ndarray]


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


def all_finite(arrays: Sequence[np.ndarray]) -> bool:
    """Whether every value of every array is finite (one fast reduction per array)."""
    for a in arrays:
        if a.dtype.kind != "f":
            continue
        # A sum is NaN/Inf whenever any element is; it can also overflow on finite data, so a
        # non-finite sum is confirmed element-wise (rare) instead of trusted.
        with np.errstate(all="ignore"):
            total = a.sum()
        if not np.isfinite(total) and not np.isfinite(a).all():
            return False
    return True


CHUNK = 1 << 17
"""Elements per chunk: a rule runs all its passes on one chunk while it is in L2 cache. Smaller
chunks fit L1 no better (a rule touches 5-10 arrays) and pay for a GIL hand-off per ufunc call:
on 2 cores, 32K-value chunks ran Trend-Smooth(adam) at 17x a model copy, 128K at 10x
(benchmarks/PERFORMANCE.md)."""


def chunked(*lists: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
    """Aligned flat chunks of lists of same-shaped arrays (views; outputs must be contiguous)."""
    for arrays in zip(*lists, strict=True):
        flats = [a.reshape(-1) for a in arrays]
        for start in range(0, flats[0].size, CHUNK):
            yield tuple(f[start : start + CHUNK] for f in flats)


THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads a rule's chunks are spread over (numpy releases the GIL inside its kernels)."""
_pool: ThreadPoolExecutor | None = None


_local = threading.local()


def _run_part(
    kernel: Callable[..., float], chunks: list[tuple[np.ndarray, ...]], scratch: int
) -> float:
    buffers = getattr(_local, "buffers", [])
    if buffers and buffers[0].size < CHUNK:  # CHUNK was raised since they were made
        buffers = []
    while len(buffers) < scratch:  # per-thread chunk scratch stays in cache, never in DRAM
        buffers.append(np.empty(CHUNK, dtype=np.float32))
    _local.buffers = buffers
    total = 0.0
    with np.errstate(all="ignore"):  # errstate is per thread; results are probed instead
        for c in chunks:
            n = c[0].size
            total += kernel(*c, *(b[:n] for b in buffers[:scratch]))
    return total


def run_chunked(
    kernel: Callable[..., float], *lists: Sequence[np.ndarray], scratch: int = 0
) -> float:
    """Run ``kernel`` on every aligned chunk of ``lists`` across threads; sum what it returns.

    ``kernel`` also gets ``scratch`` float32 chunk-sized buffers of its own. Each chunk's
    passes run while it is in cache, and chunks are independent, so the result is
    bit-identical for any number of threads.
    """
    global _pool
    chunks = list(chunked(*lists))
    threads = min(THREADS, len(chunks))
    if threads <= 1:
        return _run_part(kernel, chunks, scratch)
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="fl-async-agg")
    parts = [chunks[i::threads] for i in range(threads)]
    futures = [_pool.submit(_run_part, kernel, part, scratch) for part in parts[1:]]
    return _run_part(kernel, parts[0], scratch) + sum(f.result() for f in futures)


def probe(chunk: np.ndarray) -> float:
    """A cheap finiteness probe: non-finite whenever ``chunk`` holds NaN or Inf (one BLAS dot)."""
    return float(np.dot(chunk, chunk))


IN_PLACE_LIMIT = 1e30
"""Bound on every array below which a rule may update its state in place: far from float32's
3.4e38, so rounding in the running bounds cannot matter."""


def squared_norm(arrays: Sequence[np.ndarray]) -> float:
    """``sum(a**2)`` over every array (chunked BLAS dots): NaN/Inf when any value is."""
    return run_chunked(probe, arrays)


def max_abs(arrays: Sequence[np.ndarray] | None) -> float:
    """The largest magnitude in ``arrays`` (0 for none): where running bounds start."""
    return max((float(np.max(np.abs(a))) for a in arrays or [] if a.size), default=0.0)


def subtract_scaled(out: np.ndarray, a: np.ndarray, scale: float, x: np.ndarray) -> None:
    """``out = a - scale * x`` without temporaries (``out`` may not alias ``a``)."""
    if scale == 1.0:  # 1.0 * x == x exactly: skip a pass
        np.subtract(a, x, out=out)
    else:
        np.multiply(x, scale, out=out)
        np.subtract(a, out, out=out)


def check_fraction(name: str, value: float, *, low: float, high: float, high_open: bool) -> float:
    """Validate ``low <= value <= high`` (``< high`` when ``high_open``) or raise ValueError."""
    bracket = ")" if high_open else "]"
    allowed = f"[{low:g}, {high:g}{bracket}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in {allowed}, got {value!r}")
    if value < low or value > high or (high_open and value == high):
        raise ValueError(f"{name} must be in {allowed}, got {value!r}")
    return float(value)


def check_non_negative(name: str, value: float) -> float:
    """Validate a finite ``value >= 0`` or raise ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def check_count(
    name: str, value: int | None, *, minimum: int, allow_none: bool = False
) -> int | None:
    """Validate an integer ``value >= minimum`` (or ``None`` when allowed) or raise ValueError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        suffix = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{suffix}, got {value!r}")
    return int(value)


class Aggregator(abc.ABC):
    """Base of every rule: validation, rejection counting, versioning and state handling.

    Subclasses implement ``_step`` on the floating arrays only; non-floating arrays (BatchNorm's
    ``num_batches_tracked``) are not aggregated and take the latest accepted value at each step.
    """

    name: ClassVar[str]
    needs_base: ClassVar[bool] = False
    """Whether the rule reads the base model's values (FedAsync, DC-ASGD)."""
    default_staleness: ClassVar[StalenessFn] = Constant()

    def __init__(
        self, *, staleness: StalenessFn | str | None = None, max_staleness: int | None = None
    ) -> None:
        self.staleness = resolve_staleness(staleness, type(self).default_staleness)
        self.max_staleness = check_count("max_staleness", max_staleness, minimum=0, allow_none=True)
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
                raise TypeError(f"params[{i}] has dtype {a.dtype}; allowed: float, int, uint")
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
    def version(self) -> int:
        """The number of server steps taken so far."""
        return self._version

    def apply(self, update: ClientUpdate) -> bool:
        """Apply one client update; return whether a server step was taken.

        A rejected update returns False, leaves all state but ``num_rejected`` unchanged, and is
        logged with its reason.
        """
        model = self._model()
        reason = self._validate(update, model)
        if reason is None:
            weight = float(self.staleness(int(update.staleness)))
            if not math.isfinite(weight) or weight < 0:
                reason = "bad-staleness-weight"
        if reason is None:
            delta = [np.asarray(update.delta[i], dtype=np.float32) for i in self._float]
            base = None
            if update.base is not None:
                base = [np.asarray(update.base[i], dtype=np.float32) for i in self._float]
            try:
                # Non-finite results are detected and rejected: numpy need not warn.
                with np.errstate(all="ignore"):
                    stepped = self._step(update, delta, base, weight)
            except Rejected as rejection:
                reason = rejection.reason
        if reason is not None:
            self._reject(reason, update)
            return False
        self._take_other(update)
        if stepped:
            self._finish_step()
        return stepped

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
    ) -> bool:
        """Apply a validated update to the floating arrays; return whether a step was taken.

        ``delta`` and ``base`` hold the floating arrays only, as float32. Raise ``Rejected``
        before changing any state; write the new model into ``self._next`` and call
        ``self._swap_next()`` to publish it.
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

    def _scratch(self, count: int) -> list[Arrays]:
        """``count`` model-shaped float32 scratch buffers, allocated once and reused."""
        while len(self._pool) < count:
            self._pool.append(self._zeros())
        return self._pool[:count]

    def _swap_next(self) -> None:
        """Publish ``self._next`` as the model's floating arrays; the old ones become scratch."""
        for j, i in enumerate(self._float):
            self._params[i], self._next[j] = self._next[j], self._params[i]

    def _require_finite(
        self, total: float, outputs: Sequence[Arrays], delta: Arrays, base: Arrays | None
    ) -> None:
        """Reject unless the new state is finite; ``total`` sums ``probe()`` of output chunks.

        NaN/Inf in the delta (or a base the rule reads) always reaches an output, and so does
        a non-finite accumulator that enters the model through a finite factor; so a probe
        per chunk, taken while it is in cache, checks inputs and overflow at once. Rules probe
        the model and each accumulator that does not reach it. A non-finite total is
        confirmed element-wise, since a dot product can overflow on finite data.
        """
        if math.isfinite(total) or all(all_finite(o) for o in outputs):
            return
        inputs = all_finite(delta) and not (self.needs_base and not all_finite(base))
        raise Rejected("overflow" if inputs else "non-finite")

    @staticmethod
    def _copy_arrays(arrays: Sequence[np.ndarray]) -> Arrays:
        return [np.array(a, dtype=np.float32, copy=True) for a in arrays]

    # ------------------------------------------------------------------------- internals
    def _model(self) -> Arrays:
        if self._params is None:
            raise RuntimeError(f"{type(self).__name__}.init(params) must be called first")
        return self._params

    def _adopt(self, model: Arrays) -> None:
        self._params = model
        self._float = [i for i, p in enumerate(model) if p.dtype.kind == "f"]
        self._other = [i for i, p in enumerate(model) if p.dtype.kind != "f"]
        self._next = [np.empty_like(model[i]) for i in self._float]
        self._pool: list[Arrays] = []
        self._pending: dict[int, np.ndarray] = {}

    def _validate(self, update: ClientUpdate, model: Arrays) -> str | None:
        tau = update.staleness
        if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 0:
            return "bad-staleness"
        if self.max_staleness is not None and tau > self.max_staleness:
            return "too-stale"
        n = update.num_examples
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            return "bad-num-examples"
        if update.base is None and (self.needs_base or self._other):
            return "missing-base"
        for arrays in (update.delta, update.base):
            if arrays is None:
                continue
            if len(arrays) != len(model):
                return "bad-shape"
            for a, p in zip(arrays, model, strict=True):
                if not isinstance(a, np.ndarray) or a.shape != p.shape:
                    return "bad-shape"
                if (a.dtype.kind == "f") != (p.dtype.kind == "f") or a.dtype.kind not in "fiu":
                    return "bad-dtype"
        return None

    def _reject(self, reason: str, update: ClientUpdate) -> None:
        self.num_rejected[reason] = self.num_rejected.get(reason, 0) + 1
        logger.warning(
            "%s rejected an update from node %s (staleness %s): %s",
            self.name,
            update.node_id,
            update.staleness,
            reason,
        )

    def _take_other(self, update: ClientUpdate) -> None:
        # Non-floating arrays carry the node's trained value, base - delta, exactly.
        for i in self._other:
            value = np.subtract(update.base[i], update.delta[i])
            self._pending[i] = np.array(value, dtype=self._params[i].dtype)

    def _finish_step(self) -> None:
        for i, value in self._pending.items():
            np.copyto(self._params[i], value)
        self._pending = {}
        self._version += 1
