"""GSGM: gradient scheduling with global momentum (docs/algorithms.md, GSGM; a reconstruction).

Wang et al., "Gradient Scheduling With Global Momentum for Asynchronous Federated Learning in
Edge Environment", IEEE IoT Journal 9(19), 2022. The paper's exact equations are not public;
docs/algorithms.md (GSGM) fixes this reconstruction of its parts 2 and 3. Part 1, the white list
that keeps every node's update frequency even, is the dispatch policy
``fl_async.scheduling.WhiteList`` (``schedule="block"``), or the aggregator's own per-node
buffers (``schedule="buffer"``, ``gsgm_buffer.Turns``). The variants (``server_optimizer``,
``momentum_rule``, ``schedule``) are stated in the same section; the defaults are the rule above
them, unchanged. The plain rule is ``fl_async.aggregators.reference.gsgm``; the fused kernels
are in ``gsgm_kernels``, the server optimizers the shared ones (``optimizers``).
"""

from __future__ import annotations

import os
from typing import Any

from fl_async.aggregators.base import APPLIED, HELD, MODEL, STEPPED, Status
from fl_async.aggregators.cached import SUM, CachedAggregator
from fl_async.aggregators.gsgm_buffer import Turns
from fl_async.aggregators.gsgm_kernels import Kernel, Step, momentum_kernel, variant_kernel
from fl_async.aggregators.kernels import Arrays, max_abs, within_limit
from fl_async.aggregators.optimizers import SGD, Adam, Momentum, ServerOptimizer
from fl_async.aggregators.staleness import StalenessFn
from fl_async.aggregators.updates import ClientUpdate, Rejected, norm_bound
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number

__all__ = ["GSGM", "implicit_momentum_beta"]

SERVER_OPTIMIZERS = ("sgd", "momentum", "adam")
"""What is applied to the scheduled, partly averaged gradient ``g``."""
MOMENTUM_RULES = ("update", "cycle", "implicit")
"""How ``server_optimizer="momentum"`` applies its momentum."""
SCHEDULES = ("block", "buffer")
"""Where the white list acts: at dispatch (``block``) or when updates are applied (``buffer``)."""


def implicit_momentum_beta(momentum: float, staleness_sum: float, count: int) -> float:
    """``beta_t = max(0, beta - mu_t)``, ``mu_t = tau_bar / (1 + tau_bar)``, ``tau_bar`` the mean
    staleness of the ``count`` updates applied so far (this one included): the momentum that
    asynchrony implies (Mitliagkas et al. 2016) taken off the explicit one."""
    tau_bar = staleness_sum / count
    return max(0.0, momentum - tau_bar / (1.0 + tau_bar))


class GSGM(CachedAggregator):
    """Partly averaged cached gradients with global momentum.

    On an update from node ``k``: ``S <- S - G[k] + delta``; ``G[k] <- delta``;
    ``g = (1 - rho) * delta + rho * S / n`` (``n`` nodes cached); ``u <- beta * u + s(tau) * g``;
    ``w <- w - lr * u``. The running sum ``S`` makes each update O(model size) for any number
    of nodes. ``fl_async.aggregators.reference.gsgm`` states the same rule without the fast
    machinery.

    Variants (docs/algorithms.md, GSGM): ``server_optimizer``
    ``"sgd"`` (``w <- w - lr * s(tau) g``) or ``"adam"`` (Trend-Smooth's Adam on ``s(tau) g``);
    ``momentum_rule`` ``"cycle"`` (FedAvgM's server momentum once per cycle of ``n`` updates) or
    ``"implicit"`` (``beta_t = max(0, beta - tau_bar / (1 + tau_bar))``); ``schedule="buffer"``
    (the white list enforced here: a node more than ``slack`` applied updates ahead of the
    slowest has its updates averaged in a buffer of its own, applied when its turn comes).

    The cache ``G`` lives in a ``GradientCache`` (``CachedAggregator``: ``cache_memory``,
    ``cache_dir``), with the same results bit for bit wherever a gradient lives.
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
        super().__init__(
            cache_memory=cache_memory,
            cache_dir=cache_dir,
            staleness=staleness,
            max_staleness=max_staleness,
        )
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
        self._turns = Turns(slack=self.slack, num_nodes=None)
        self.num_nodes = num_nodes
        self.optimizer = self._server_optimizer()
        """What steps on ``g`` at every update (``cycle``: SGD, its momentum at the close)."""

    def _server_optimizer(self) -> ServerOptimizer:
        """The shared optimizer that ``server_optimizer`` and ``momentum_rule`` name."""
        if self.server_optimizer == "adam":
            return Adam(beta1=self.beta1, beta2=self.beta2, eps=self.eps)
        if self.server_optimizer == "sgd" or self.momentum_rule == "cycle":
            return SGD()
        return Momentum(beta=self.momentum)

    @property
    def num_nodes(self) -> int | None:
        """``schedule="buffer"``: the nodes expected; those not seen yet count 0 in the minimum
        (the preset sets it to N at start). None: only the nodes seen count."""
        return self._turns.num_nodes

    @num_nodes.setter
    def num_nodes(self, value: int | None) -> None:
        self._turns.num_nodes = check_int("num_nodes", value, minimum=1, allow_none=True)

    @property
    def waiting(self) -> dict[int, int]:
        """``schedule="buffer"``: node id -> the number of its updates held until its turn."""
        return {k: held.count for k, held in sorted(self._turns.waiting.items())}

    @property
    def applied_counts(self) -> dict[int, int]:
        """``schedule="buffer"``: node id -> its applied updates (a held average counts once),
        for the nodes counted in the minimum."""
        return dict(sorted(self._turns.counts.items()))

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
            **super().hyperparameters(),
        }

    def forget(self, node_id: int) -> None:
        """Drop node ``node_id``'s cached gradient from the sum (``S <- S - G[k]``); with
        ``schedule="buffer"`` also its held updates, and its count leaves the minimum."""
        super().forget(node_id)
        if self.schedule == "buffer":
            self._turns.forget(node_id)

    # ------------------------------------------------------------------------------- state
    def _accumulators(self) -> tuple[str, ...]:
        """The model-shaped state besides ``S``, by name."""
        if self.server_optimizer == "sgd":
            return ()
        if self.server_optimizer == "adam":
            return ("m", "q")
        return ("c", "m") if self.momentum_rule == "cycle" else ("m",)

    def _init_state(self) -> None:
        self._reset_cache()
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
        wait, count = self._turns.must_wait(node)
        if wait:
            self._turns.hold(node, delta, norm, weight, staleness)
            status = HELD
        else:
            self._apply_one(node, delta, base, weight, staleness, norm)
            count += 1
            status = APPLIED
        self._turns.record(node, count)
        return STEPPED if self._release() else status

    def _release(self) -> bool:
        """Apply the held average of every node whose turn has come, each as one GSGM update
        from that node; return whether any was applied."""
        released = False
        for node, held in self._turns.due():
            delta = [t / held.count for t in held.total]  # the plain mean, float32
            weight, staleness = held.weight / held.count, held.staleness / held.count
            try:  # (inside _step: numpy's warnings are already off)
                self._apply_one(node, delta, None, weight, staleness, norm_bound(delta))
            except Rejected as rejection:  # the average overflowed: dropped, and counted
                self._reject(rejection.reason, node, round(staleness))
                continue
            self._turns.counts[node] += 1
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
        step = Step(weight=weight, n=n, beta=beta, t=self._t + 1, close=close)
        # In place when the bounds prove the step finite; else into scratch, checked, published.
        in_place = norm is not None and self._fits(node, norm, step)
        target = self._target(node, in_place)
        inputs = [delta, target, *([] if cached is None else [cached])]
        names, kernel, scratch = self._plan(step, in_place=in_place)
        self._advance(
            kernel, names, inputs, in_place=in_place, delta=delta, base=base, scratch=scratch
        )
        self._store(node, target, in_place, norm)
        if not in_place:
            self._measure_bounds(caches=False)
        if self.momentum_rule == "implicit":
            self._staleness_sum += staleness
            self._staleness_count = count
        if self.server_optimizer == "adam":
            self._t = step.t
        if self.momentum_rule == "cycle":
            self._cycle_count = 0 if close else self._cycle_count + 1

    def _plan(self, step: Step, *, in_place: bool) -> tuple[tuple[str, ...], Kernel, int]:
        """The state a step writes, its kernel, and its number of scratch chunks."""
        names = (SUM, *self._accumulators(), MODEL)
        rho, lr, probes = self.average_weight, self.lr, not in_place
        if self.server_optimizer == "momentum" and self.momentum_rule != "cycle":
            return names, momentum_kernel(lr=lr, rho=rho, step=step, probes=probes), 1
        cycle = None
        if self.momentum_rule == "cycle":  # u is touched only when the cycle closes
            names = names if step.close else (SUM, "c", MODEL)
            cycle = Momentum(beta=self.momentum)
        kernel = variant_kernel(
            optimizer=self.optimizer,
            lr=lr,
            rho=rho,
            step=step,
            cycle=cycle,
            pairs=len(names) - 2,
            probes=probes,
        )
        return names, kernel, 2

    def _fits(self, node_id: int, norm: float, step: Step) -> bool:
        """Whether the update provably keeps every array below ``IN_PLACE_LIMIT``; if so, record
        the new bounds (``norm`` bounds ``|delta|``, each cache's norm bounds ``|G[k]|``)."""
        b = self._bounds
        s = b["S"] + self._cache_bounds.get(node_id, 0.0) + norm
        rho = self.average_weight
        g = step.weight * ((1.0 - rho) * norm + rho * s / step.n)
        new = {**b, "S": s}
        if self.momentum_rule == "cycle":
            new["c"] = b["c"] + g
            new["w"] = b["w"] + self.lr * g
            if step.close:
                new["w"] += self.lr * step.beta * b["m"]
                new["m"] = step.beta * b["m"] + new["c"]
                new["c"] = 0.0
        else:
            optimizer = self.optimizer
            if self.server_optimizer == "momentum":  # implicit: this update's beta_t
                optimizer = Momentum(beta=step.beta)
            new["w"] = b["w"] + optimizer.bound(new, g, lr=self.lr, t=step.t)
        if not within_limit(new):
            return False
        self._bounds = new
        return True

    def _measure_bounds(self, *, caches: bool = True) -> None:
        """Exact maxima of |S|, |w| and the optimizer's arrays (and of each cache and held
        sum): where the running bounds start."""
        self._bounds = {name: max_abs(self._acc[name]) for name in (SUM, *self._accumulators())}
        self._bounds["w"] = max_abs(self._floats())
        if caches:
            self._measure_cache_bounds()
            self._turns.measure()

    def _rule_state(self) -> dict[str, Any]:
        acc = self._acc
        state: dict[str, Any] = {
            **self._cache_state(),
            "velocity": self._copy_arrays(acc["m"]) if self._has_velocity() else None,
        }
        if self.server_optimizer == "adam":
            state.update(m=self._copy_arrays(acc["m"]), q=self._copy_arrays(acc["q"]), t=self._t)
        if self.momentum_rule == "cycle":
            state.update(cycle_sum=self._copy_arrays(acc["c"]), cycle_count=self._cycle_count)
        if self.momentum_rule == "implicit":
            state.update(staleness_sum=self._staleness_sum, staleness_count=self._staleness_count)
        if self.schedule == "buffer":
            state.update(self._turns.state_dict())
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
        self._load_cache_state(state)
        stored = {"m": "velocity" if self._has_velocity() else "m", "q": "q", "c": "cycle_sum"}
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
            self._turns.load_state_dict(state)
        self._measure_bounds()

    def _has_velocity(self) -> bool:
        """Whether ``m`` is the momentum's velocity (saved as ``velocity``), not Adam's ``m``."""
        return self.server_optimizer == "momentum"

    def _init_counters(self) -> None:
        """The rule's counters at their start."""
        self._t = 0  # adam: steps taken
        self._cycle_count = 0  # cycle: updates applied since the cycle began
        self._staleness_sum, self._staleness_count = 0.0, 0  # implicit: over applied updates
        self._turns = Turns(slack=self.slack, num_nodes=self.num_nodes)  # buffer
