"""GSGM: gradient scheduling with global momentum (docs/algorithms.md, GSGM; a reconstruction).

Wang et al., "Gradient Scheduling With Global Momentum for Asynchronous Federated Learning in
Edge Environment", IEEE IoT Journal 9(19), 2022. The paper's exact equations are not public;
docs/algorithms.md (GSGM) fixes this reconstruction of its parts 2 and 3. Part 1, the white list
that keeps every node's update frequency even, is the dispatch policy
``fl_async.scheduling.WhiteList`` (``schedule="block"``), or the aggregator's own per-node
buffers (``schedule="buffer"``). The variants (``server_optimizer``, ``momentum_rule``,
``schedule``) are stated in the same section; the defaults are the rule above them, unchanged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_async.aggregators.base import APPLIED, HELD, MODEL, STEPPED, Aggregator, Status
from fl_async.aggregators.cache import (
    CacheUsage,
    GradientCache,
    check_cache_dir,
    check_cache_memory,
)
from fl_async.aggregators.kernels import Arrays, all_finite, max_abs, probe, within_limit
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, Rejected, norm_bound
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number

SERVER_OPTIMIZERS = ("sgd", "momentum", "adam")
"""What is applied to the scheduled, partly averaged gradient ``g``."""
MOMENTUM_RULES = ("update", "cycle", "implicit")
"""How ``server_optimizer="momentum"`` applies its momentum."""
SCHEDULES = ("block", "buffer")
"""Where the white list acts: at dispatch (``block``) or when updates are applied (``buffer``)."""


def gsgm_reference(
    state: dict[str, Any],
    node: int,
    delta: Arrays,
    weight: float,
    *,
    lr: float,
    momentum: float,
    average_weight: float,
) -> dict[str, Any]:
    """One GSGM update from node ``node`` as docs/algorithms.md (GSGM) writes it: the readable
    rule that ``GSGM``'s fast kernel is tested against, bit for bit (same float32 operations in
    the same order). ``state`` holds ``w``, ``S``, ``u`` (lists of float32 arrays) and ``G``
    (node id -> its cached pseudo-gradient); the new state is returned."""
    rho, beta = average_weight, momentum
    cached = state["G"].get(node, [np.zeros_like(d) for d in delta])
    S = [s - g + d for s, g, d in zip(state["S"], cached, delta, strict=True)]
    G = {**state["G"], node: [d.copy() for d in delta]}
    n = len(G)
    # u <- beta u + s(tau) g, where g = (1 - rho) delta + rho S / n: s(tau) enters both terms
    u = [
        beta * u_k + weight * (1 - rho) * d + weight * rho / n * s
        for u_k, d, s in zip(state["u"], delta, S, strict=True)
    ]
    w = [w_k - lr * u_k for w_k, u_k in zip(state["w"], u, strict=True)]
    return {"w": w, "S": S, "u": u, "G": G}


def implicit_momentum_beta(momentum: float, staleness_sum: float, count: int) -> float:
    """``beta_t = max(0, beta - mu_t)``, ``mu_t = tau_bar / (1 + tau_bar)``, ``tau_bar`` the mean
    staleness of the ``count`` updates applied so far (this one included): the momentum that
    asynchrony implies (Mitliagkas et al. 2016) taken off the explicit one."""
    tau_bar = staleness_sum / count
    return max(0.0, momentum - tau_bar / (1.0 + tau_bar))


def gsgm_variant_reference(
    state: dict[str, Any],
    node: int,
    delta: Arrays,
    weight: float,
    staleness: float,
    *,
    lr: float,
    momentum: float,
    average_weight: float,
    server_optimizer: str = "momentum",
    momentum_rule: str = "update",
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> dict[str, Any]:
    """One GSGM update with any ``server_optimizer`` / ``momentum_rule``, in the kernel's float32
    operations and order (so the fast kernel equals it bit for bit). ``state`` holds ``w``,
    ``S``, ``G`` and what the optimizer keeps: ``u`` (momentum), ``c`` and ``j`` (cycle: the
    cycle's sum and its number of updates), ``tau_sum`` and ``tau_count`` (implicit), ``m``,
    ``q`` and ``t`` (adam). ``staleness`` is read by ``implicit`` only. The new state is returned.
    """
    rho = average_weight
    cached = state["G"].get(node, [np.zeros_like(d) for d in delta])
    S = [s - g + d for s, g, d in zip(state["S"], cached, delta, strict=True)]
    G = {**state["G"], node: [d.copy() for d in delta]}
    n = len(G)
    new = {**state, "S": S, "G": G}
    if server_optimizer == "momentum" and momentum_rule != "cycle":
        beta = momentum
        if momentum_rule == "implicit":
            new["tau_sum"], new["tau_count"] = state["tau_sum"] + staleness, state["tau_count"] + 1
            beta = implicit_momentum_beta(momentum, new["tau_sum"], new["tau_count"])
        # gsgm_reference's three terms, with beta_t
        new["u"] = [
            beta * u_k + weight * (1 - rho) * d + weight * rho / n * s
            for u_k, d, s in zip(state["u"], delta, S, strict=True)
        ]
        new["w"] = [w_k - lr * u_k for w_k, u_k in zip(state["w"], new["u"], strict=True)]
        return new
    # the scheduled, partly averaged gradient g = s(tau) ((1 - rho) delta + rho S / n)
    g = [weight * (1 - rho) * d + weight * rho / n * s for d, s in zip(delta, S, strict=True)]
    if server_optimizer == "sgd":
        new["w"] = [w_k - lr * x for w_k, x in zip(state["w"], g, strict=True)]
    elif server_optimizer == "adam":
        t = new["t"] = state["t"] + 1
        new["m"] = [beta1 * m + (1 - beta1) * x for m, x in zip(state["m"], g, strict=True)]
        new["q"] = [beta2 * q + (1 - beta2) * (x * x) for q, x in zip(state["q"], g, strict=True)]
        # lr (m / c1) / (sqrt(q / c2) + eps) = lr sqrt(c2) / c1 * m / (sqrt(q) + eps sqrt(c2))
        root_c2 = math.sqrt(1 - beta2**t)
        scale = lr * root_c2 / (1 - beta1**t)
        new["w"] = [
            w_k - scale * (m / (np.sqrt(q) + eps * root_c2))
            for w_k, m, q in zip(state["w"], new["m"], new["q"], strict=True)
        ]
    else:  # momentum once per cycle, in FedAvgM's order
        new["c"] = [c + x for c, x in zip(state["c"], g, strict=True)]
        new["w"] = [w_k - lr * x for w_k, x in zip(state["w"], g, strict=True)]
        new["j"] = state["j"] + 1
        if new["j"] >= n:  # the cycle is complete: w <- w - lr beta u; u <- beta u + c; c <- 0
            beta = momentum
            new["w"] = [w_k - lr * beta * u for w_k, u in zip(new["w"], state["u"], strict=True)]
            new["u"] = [beta * u + c for u, c in zip(state["u"], new["c"], strict=True)]
            new["c"] = [np.zeros_like(c) for c in new["c"]]
            new["j"] = 0
    return new


@dataclass
class _Waiting:
    """Node ``k``'s updates held by ``schedule="buffer"`` until its turn."""

    total: Arrays
    """The sum of the held deltas, in arrival order."""
    count: int
    weight: float
    """The sum of their staleness weights ``s(tau)``."""
    staleness: int
    """The sum of their staleness."""
    bound: float
    """Bounds ``|total|``."""


class GSGM(Aggregator):
    """Partly averaged cached gradients with global momentum.

    On an update from node ``k``: ``S <- S - G[k] + delta``; ``G[k] <- delta``;
    ``g = (1 - rho) * delta + rho * S / n`` (``n`` nodes cached); ``u <- beta * u + s(tau) * g``;
    ``w <- w - lr * u``. The running sum ``S`` makes each update O(model size) for any number
    of nodes. ``gsgm_reference`` states the same rule without the fast machinery.

    Variants (docs/algorithms.md, GSGM; ``gsgm_variant_reference``): ``server_optimizer``
    ``"sgd"`` (``w <- w - lr * s(tau) g``) or ``"adam"`` (Trend-Smooth's Adam on ``s(tau) g``);
    ``momentum_rule`` ``"cycle"`` (FedAvgM's server momentum once per cycle of ``n`` updates) or
    ``"implicit"`` (``beta_t = max(0, beta - tau_bar / (1 + tau_bar))``); ``schedule="buffer"``
    (the white list enforced here: a node more than ``slack`` applied updates ahead of the
    slowest has its updates averaged in a buffer of its own, applied when its turn comes).

    The cache ``G`` lives in a ``GradientCache``: in memory up to ``cache_memory`` bytes of
    gradients (None: no limit), the nodes beyond it in a memory-mapped file in ``cache_dir``
    (None: the system's temporary directory), with the same results bit for bit.
    """

    name = "GSGM"

    def __init__(
        self,
        *,
        lr: float = 0.1,
        momentum: float = 0.9,
        average_weight: float = 0.5,
        server_optimizer: str = "momentum",
        momentum_rule: str = "update",
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        schedule: str = "block",
        slack: int = 0,
        num_nodes: int | None = None,
        cache_memory: float | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
    ) -> None:
        super().__init__(staleness=staleness, max_staleness=max_staleness)
        self.lr = check_number("lr", lr, minimum=0)
        self.momentum = check_number("momentum", momentum, minimum=0, maximum=1, max_open=True)
        self.average_weight = check_number("average_weight", average_weight, minimum=0, maximum=1)
        self.server_optimizer = check_choice(
            "server_optimizer", server_optimizer, SERVER_OPTIMIZERS
        )
        self.momentum_rule = check_choice("momentum_rule", momentum_rule, MOMENTUM_RULES)
        if self.momentum_rule != "update" and self.server_optimizer != "momentum":
            raise InvalidArgument(
                f"momentum_rule={momentum_rule!r} needs server_optimizer='momentum', got "
                f"server_optimizer={server_optimizer!r} (use momentum_rule='update' with it)"
            )
        self.beta1 = check_number("beta1", beta1, minimum=0, maximum=1, max_open=True)
        self.beta2 = check_number("beta2", beta2, minimum=0, maximum=1, max_open=True)
        self.eps = check_number("eps", eps, minimum=0, min_open=True)
        self.schedule = check_choice("schedule", schedule, SCHEDULES)
        self.slack = check_int("slack", slack, minimum=0)
        """``schedule="buffer"``'s bound (with ``"block"`` the dispatch policy holds it)."""
        self.num_nodes = check_int("num_nodes", num_nodes, minimum=1, allow_none=True)
        """``schedule="buffer"``: the nodes expected; those not seen yet count 0 in the minimum
        (the preset sets it to N at start). None: only the nodes seen count."""
        self.cache_memory = check_cache_memory("cache_memory", cache_memory)
        """Bytes of cached gradients kept in memory (None: no limit); the rest spill to disk."""
        self.cache_dir = check_cache_dir("cache_dir", cache_dir)
        """Where the file of spilled gradients is made (None: the system's temporary directory)."""
        self._cache = GradientCache(memory=self.cache_memory, directory=self.cache_dir)

    @property
    def num_cached(self) -> int:
        """Nodes whose latest pseudo-gradient is cached."""
        return len(self._cache)

    @property
    def cache_usage(self) -> CacheUsage:
        """How many cached gradients are in memory and on disk, and their bytes."""
        return self._cache.usage

    @property
    def waiting(self) -> dict[int, int]:
        """``schedule="buffer"``: node id -> the number of its updates held until its turn."""
        return {k: held.count for k, held in sorted(getattr(self, "_waiting", {}).items())}

    @property
    def applied_counts(self) -> dict[int, int]:
        """``schedule="buffer"``: node id -> its applied updates (a held average counts once),
        for the nodes counted in the minimum."""
        return dict(sorted(getattr(self, "_counts", {}).items()))

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "momentum": self.momentum,
            "average_weight": self.average_weight,
            "server_optimizer": self.server_optimizer,
            "momentum_rule": self.momentum_rule,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "schedule": self.schedule,
            "slack": self.slack,
            "num_nodes": self.num_nodes,
            "cache_memory": self.cache_memory,
            "cache_dir": self.cache_dir,
            **super().hyperparameters(),
        }

    def forget(self, node_id: int) -> None:
        """Drop node ``node_id``'s cached gradient from the sum (``S <- S - G[k]``); with
        ``schedule="buffer"`` also its held updates, and its count leaves the minimum."""
        cached = self._cache.get(node_id)
        if cached is not None:
            for s, g in zip(self._acc["S"], cached, strict=True):
                np.subtract(s, g, out=s)
            self._cache.discard(node_id)
            self._bounds["S"] += self._cache_bounds.pop(node_id)
        if self.schedule == "buffer":
            self._counts.pop(node_id, None)
            self._waiting.pop(node_id, None)
            self._known.add(node_id)

    # ------------------------------------------------------------------------------- state
    def _accumulators(self) -> tuple[str, ...]:
        """The model-shaped state besides ``S``, by name."""
        if self.server_optimizer == "sgd":
            return ()
        if self.server_optimizer == "adam":
            return ("m", "q")
        return ("c", "u") if self.momentum_rule == "cycle" else ("u",)

    def close(self) -> None:
        """Release the cached gradients now, and with them the file of those that spilled (also
        done when the aggregator is garbage-collected). ``init()`` or ``load_state_dict()`` makes
        it usable again."""
        self._cache.close()
        self._params = None  # apply() and params refuse until init() or load_state_dict()

    def _init_state(self) -> None:
        self._cache.reset([p.shape for p in self._floats()])
        self._acc["S"] = self._zeros()
        for name in self._accumulators():
            self._acc[name] = self._zeros()
        self._init_counters()
        self._measure_bounds()

    # -------------------------------------------------------------------------------- step
    def _step(
        self, update: ClientUpdate, delta: Arrays, base: Arrays | None, weight: float
    ) -> Status:
        norm = norm_bound(delta)  # bounds |delta|, and rejects NaN/Inf
        node, staleness = update.node_id, int(update.staleness)
        if self.schedule == "block":
            self._apply_one(node, delta, base, weight, staleness, norm)
            return APPLIED
        # buffer: a node more than ``slack`` applied updates ahead of the minimum waits
        count = self._counts.get(node)
        if count is None:  # first seen, or back after forget(): it enters at the minimum
            count = self._minimum()
        if node in self._waiting or count > self._minimum() + self.slack:
            self._hold(node, delta, norm, weight, staleness)
            status = HELD
        else:
            self._apply_one(node, delta, base, weight, staleness, norm)
            count += 1
            status = APPLIED
        self._counts[node] = count
        self._known.add(node)
        return STEPPED if self._release() else status

    def _minimum(self) -> int:
        """The smallest applied count over the counted nodes; 0 while an expected node
        (``num_nodes``) has not been seen."""
        unseen = self.num_nodes is not None and self.num_nodes > len(self._known)
        return 0 if unseen or not self._counts else min(self._counts.values())

    def _hold(
        self, node: int, delta: Arrays, norm: float | None, weight: float, staleness: int
    ) -> None:
        """Add ``delta`` to node ``node``'s held sum (rejected, unchanged, if it overflows)."""
        held = self._waiting.get(node)
        if held is None:
            total = self._copy_arrays(delta)
            bound = max_abs(total) if norm is None else norm
            self._waiting[node] = _Waiting(total, 1, weight, staleness, bound)
            return
        bound = math.inf if norm is None else held.bound + norm
        if within_limit({"held": bound}):
            for t, d in zip(held.total, delta, strict=True):
                np.add(t, d, out=t)
        else:
            total = [np.add(t, d) for t, d in zip(held.total, delta, strict=True)]
            if not all_finite(total):
                raise Rejected("overflow")
            held.total, bound = total, max_abs(total)
        held.count += 1
        held.weight += weight
        held.staleness += staleness
        held.bound = bound

    def _release(self) -> bool:
        """Apply the held average of every node whose turn has come (ascending node id), each
        as one GSGM update from that node; return whether any was applied. Applying one never
        raises the minimum (a node waits only while above it), so one pass finds them all."""
        if not self._waiting:
            return False
        limit = self._minimum() + self.slack
        released = False
        for node in sorted(self._waiting):
            if self._counts[node] > limit:
                continue
            held = self._waiting.pop(node)
            delta = [t / held.count for t in held.total]  # the plain mean, float32
            weight, staleness = held.weight / held.count, held.staleness / held.count
            try:  # (inside _step: numpy's warnings are already off)
                self._apply_one(node, delta, None, weight, staleness, norm_bound(delta))
            except Rejected as rejection:  # the average overflowed: dropped, and counted
                self._reject(rejection.reason, node, round(staleness))
                continue
            self._counts[node] += 1
            released = True
        return released

    def _apply_one(
        self,
        node: int,
        delta: Arrays,
        base: Arrays | None,
        weight: float,
        staleness: float,
        norm: float | None,
    ) -> None:
        """One GSGM update from ``node`` (raise ``Rejected`` before changing any state)."""
        cached = self._cache.get(node)
        n = len(self._cache) + (cached is None)
        beta, count = self.momentum, self._staleness_count + 1
        if self.momentum_rule == "implicit":
            beta = implicit_momentum_beta(self.momentum, self._staleness_sum + staleness, count)
        close = self.momentum_rule == "cycle" and self._cycle_count + 1 >= n
        t = self._t + 1
        # In place when the bounds prove the step finite; else into scratch, checked, published.
        in_place = norm is not None and self._fits(node, norm, weight, n, beta, t, close)
        if not in_place:
            target = self._twins("G")[0]
            if cached is None:  # a row for the new G[k] now, before any state changes
                self._cache.make_room()
        else:  # a cached G[k] is read before it is overwritten, chunk by chunk
            target = self._cache.slot(node)
        inputs = [delta, target, *([] if cached is None else [cached])]
        names = ("S", *self._accumulators(), MODEL)
        if self.server_optimizer == "momentum" and self.momentum_rule != "cycle":
            kernel = self._kernel(weight, n, beta, probes=not in_place)
            scratch = 1
        else:  # cycle: u is touched only when the cycle closes
            names = names if close or self.momentum_rule != "cycle" else ("S", "c", MODEL)
            kernel = self._variant_kernel(weight, n, t, close, len(names) - 2, not in_place)
            scratch = 2
        self._advance(
            kernel, names, inputs, in_place=in_place, delta=delta, base=base, scratch=scratch
        )
        if not in_place:  # the new G[k] is stored; what the cache gives back is the next scratch
            self._release_twin("G", self._cache.put(node, target))
            self._measure_bounds(caches=False)
        self._cache_bounds[node] = max_abs(target) if norm is None else norm
        if self.momentum_rule == "implicit":
            self._staleness_sum += staleness
            self._staleness_count = count
        if self.server_optimizer == "adam":
            self._t = t
        if self.momentum_rule == "cycle":
            self._cycle_count = 0 if close else self._cycle_count + 1

    def _kernel(self, weight: float, n: int, beta: float, *, probes: bool) -> Callable[..., float]:
        """The momentum rule (``update``; ``implicit`` with its ``beta_t``) on one chunk, with
        or without probes. Outputs may be the inputs themselves (in place): every input value
        is read before its output is written."""
        rho = self.average_weight

        def kernel(ns, s, nv, u, out, w, d, nc, *rest) -> float:
            *g, tmp = rest
            if g:
                np.subtract(s, g[0], out=ns)
                np.add(ns, d, out=ns)  # S - G[k] + delta
            else:
                np.add(s, d, out=ns)
            np.copyto(nc, d)  # the new G[k], copied while delta is in cache
            # u = beta * u + s(tau) * ((1 - rho) * delta + rho * S / n), as three terms
            np.multiply(u, beta, out=nv)
            np.multiply(d, weight * (1.0 - rho), out=tmp)
            np.add(nv, tmp, out=nv)
            np.multiply(ns, weight * rho / n, out=tmp)
            np.add(nv, tmp, out=nv)
            if self.lr == 1.0:  # 1.0 * u == u exactly: skip a pass
                np.subtract(w, nv, out=out)
            else:
                np.multiply(nv, self.lr, out=tmp)
                np.subtract(w, tmp, out=out)  # w - lr * u
            return probe(out) if probes else 0.0  # S and u reach w through finite factors

        return kernel

    def _variant_kernel(
        self, weight: float, n: int, t: int, close: bool, pairs: int, probes: bool
    ) -> Callable[..., float]:
        """``sgd``, ``adam`` and the ``cycle`` momentum on one chunk: ``g`` is formed first (in
        a scratch chunk), then the optimizer's step. ``pairs``: the (new, old) pairs between
        ``S`` and the model. In place as ``_kernel``; every output is probed."""
        rho, lr, beta = self.average_weight, self.lr, self.momentum
        optimizer = self.server_optimizer
        beta1, beta2 = self.beta1, self.beta2
        root_c2 = math.sqrt(1.0 - beta2**t)
        scale = lr * root_c2 / (1.0 - beta1**t)

        def kernel(ns, s, *rest) -> float:
            state, (out, w, d, nc, *cached, g, tmp) = rest[: 2 * pairs], rest[2 * pairs :]
            if cached:
                np.subtract(s, cached[0], out=ns)
                np.add(ns, d, out=ns)  # S - G[k] + delta
            else:
                np.add(s, d, out=ns)
            np.copyto(nc, d)  # the new G[k]
            np.multiply(d, weight * (1.0 - rho), out=g)
            np.multiply(ns, weight * rho / n, out=tmp)
            np.add(g, tmp, out=g)  # g = s(tau) (1 - rho) delta + s(tau) rho / n S
            if optimizer == "adam":
                nm, m, nq, q = state
                np.multiply(m, beta1, out=nm)
                np.multiply(g, 1.0 - beta1, out=tmp)
                np.add(nm, tmp, out=nm)  # m = beta1 m + (1 - beta1) g
                np.square(g, out=tmp)
                np.multiply(tmp, 1.0 - beta2, out=tmp)
                np.multiply(q, beta2, out=nq)
                np.add(nq, tmp, out=nq)  # q = beta2 q + (1 - beta2) g g
                np.sqrt(nq, out=tmp)
                np.add(tmp, self.eps * root_c2, out=tmp)
                np.divide(nm, tmp, out=tmp)
                np.multiply(tmp, scale, out=tmp)
                np.subtract(w, tmp, out=out)  # w - lr sqrt(c2) / c1 * m / (sqrt(q) + eps sqrt(c2))
            elif lr == 1.0:
                np.subtract(w, g, out=out)
            else:
                np.multiply(g, lr, out=tmp)
                np.subtract(w, tmp, out=out)  # w - lr g
            if optimizer == "momentum":  # cycle
                ncy, cy, *momentum = state
                np.add(cy, g, out=ncy)  # c = c + g
                if close:
                    nu, u = momentum
                    np.multiply(u, lr * beta, out=tmp)
                    np.subtract(out, tmp, out=out)  # w - lr beta u (the previous u)
                    np.multiply(u, beta, out=nu)
                    np.add(nu, ncy, out=nu)  # u = beta u + c
                    ncy.fill(0.0)  # c = 0
            if not probes:
                return 0.0
            return probe(ns) + probe(out) + sum(probe(a) for a in state[::2])

        return kernel

    def _fits(
        self, node_id: int, norm: float, weight: float, n: int, beta: float, t: int, close: bool
    ) -> bool:
        """Whether the update provably keeps every array below ``IN_PLACE_LIMIT``; if so, record
        the new bounds (``norm`` bounds ``|delta|``, each cache's norm bounds ``|G[k]|``)."""
        b = self._bounds
        s = b["S"] + self._cache_bounds.get(node_id, 0.0) + norm
        rho = self.average_weight
        g = weight * ((1.0 - rho) * norm + rho * s / n)
        new = {"S": s}
        if self.server_optimizer == "sgd":
            new["w"] = b["w"] + self.lr * g
        elif self.server_optimizer == "adam":
            new["m"] = self.beta1 * b["m"] + (1.0 - self.beta1) * g
            new["q"] = self.beta2 * b["q"] + (1.0 - self.beta2) * g * g
            # the denominator sqrt(q) + eps * sqrt(c2) is at least eps * sqrt(c2)
            new["w"] = b["w"] + self.lr * new["m"] / ((1.0 - self.beta1**t) * self.eps)
        elif self.momentum_rule == "cycle":
            new["c"] = b["c"] + g
            new["u"] = b["u"]
            new["w"] = b["w"] + self.lr * g
            if close:
                new["w"] += self.lr * beta * b["u"]
                new["u"] = beta * b["u"] + new["c"]
                new["c"] = 0.0
        else:
            new["u"] = beta * b["u"] + g
            new["w"] = b["w"] + self.lr * new["u"]
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self, *, caches: bool = True) -> None:
        """Exact maxima of |S|, |w| and the optimizer's arrays (and of each cache and held
        sum): where the running bounds start."""
        self._bounds = {name: max_abs(self._acc[name]) for name in ("S", *self._accumulators())}
        self._bounds["w"] = max_abs(self._floats())
        if caches:
            self._cache_bounds = {k: max_abs(g) for k, g in self._cache.items()}
            for held in self._waiting.values():
                held.bound = max_abs(held.total)

    def _rule_state(self) -> dict[str, Any]:
        acc = self._acc
        state: dict[str, Any] = {
            "cache": {k: self._copy_arrays(g) for k, g in self._cache.items()},
            "sum": self._copy_arrays(acc["S"]),
            "velocity": self._copy_arrays(acc["u"]) if "u" in acc else None,
        }
        if self.server_optimizer == "adam":
            state.update(m=self._copy_arrays(acc["m"]), q=self._copy_arrays(acc["q"]), t=self._t)
        if self.momentum_rule == "cycle":
            state.update(cycle_sum=self._copy_arrays(acc["c"]), cycle_count=self._cycle_count)
        if self.momentum_rule == "implicit":
            state.update(staleness_sum=self._staleness_sum, staleness_count=self._staleness_count)
        if self.schedule == "buffer":
            state["counts"] = dict(self._counts)
            state["known"] = sorted(self._known)
            state["waiting"] = {
                k: {"total": self._copy_arrays(h.total), "count": h.count, "weight": h.weight,
                    "staleness": h.staleness}
                for k, h in self._waiting.items()
            }  # fmt: skip
        return state

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        needed = {
            "velocity": self.server_optimizer == "momentum",
            "m": self.server_optimizer == "adam",
            "cycle_sum": self.momentum_rule == "cycle",
            "staleness_sum": self.momentum_rule == "implicit",
            "waiting": self.schedule == "buffer",
        }
        if any((state.get(key) is not None) != wanted for key, wanted in needed.items()):
            raise ValueError(
                f"state_dict does not match server_optimizer={self.server_optimizer!r}, "
                f"momentum_rule={self.momentum_rule!r}, schedule={self.schedule!r}"
            )
        self._init_counters()
        self._cache.reset([p.shape for p in self._floats()])
        for k, g in state["cache"].items():  # placed in the state's order, under this budget
            self._cache.put(k, self._copy_arrays(g))
        self._acc["S"] = self._copy_arrays(state["sum"])
        stored = {"u": "velocity", "m": "m", "q": "q", "c": "cycle_sum"}
        for name in self._accumulators():
            self._acc[name] = self._copy_arrays(state[stored[name]])
        if self.server_optimizer == "adam":
            self._t = int(state["t"])
        if self.momentum_rule == "cycle":
            self._cycle_count = int(state["cycle_count"])
        if self.momentum_rule == "implicit":
            self._staleness_sum = float(state["staleness_sum"])
            self._staleness_count = int(state["staleness_count"])
        if self.schedule == "buffer":
            self._counts = {int(k): int(c) for k, c in state["counts"].items()}
            self._known = {int(k) for k in state["known"]}
            self._waiting = {
                int(k): _Waiting(self._copy_arrays(h["total"]), int(h["count"]),
                                 float(h["weight"]), int(h["staleness"]), 0.0)
                for k, h in state["waiting"].items()
            }  # fmt: skip
        self._measure_bounds()

    def _init_counters(self) -> None:
        """The rule's counters at their start."""
        self._t = 0  # adam: steps taken
        self._cycle_count = 0  # cycle: updates applied since the cycle began
        self._staleness_sum, self._staleness_count = 0.0, 0  # implicit: over applied updates
        self._counts: dict[int, int] = {}  # buffer: applied updates per counted node
        self._known: set[int] = set()  # buffer: nodes seen or forgotten
        self._waiting: dict[int, _Waiting] = {}  # buffer: held updates per node
