"""One strategy per algorithm: an aggregator paired with its dispatch policy.

Each preset is constructible with no arguments. ``lr="auto"`` resolves with N = the number of
nodes at start (ALGORITHMS.md, "Safe defaults for presets"), so that one cycle of N updates moves
about as far as one FedAvg round: ASGD, DCASGD, ASP and TrendSmooth(sgd) ``1/N``; GSGM and
TrendSmooth(momentum) ``(1 - beta)/N``; TrendSmooth(adam) ``0.01``; FedBuff
``buffer_size = min(10, N)`` with ``lr = 1``. Every other keyword goes to ``AsyncStrategy``
(``clock=``, ``min_nodes=``, ``eval_every=``, ``checkpoint_dir=``, ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async import aggregators as rules
from fl_async.aggregators import ClientUpdate, StalenessFn
from fl_async.scheduling import ASP as ASPPolicy
from fl_async.scheduling import Asynchronous, Barrier, OneStepDelay, WhiteList
from fl_async.strategies.async_strategy import AsyncStrategy, _Task

AUTO = "auto"


def _lr(value: float | str, fallback: float, name: str = "lr") -> float:
    """A starting rate: ``fallback`` for ``"auto"`` (resolved at start)."""
    if isinstance(value, str):
        if value != AUTO:
            raise ValueError(f"{name} must be a number >= 0 or 'auto', got {value!r}")
        return fallback
    return value


class ASGD(AsyncStrategy):
    """Asynchronous SGD, fully asynchronous dispatch; ``lr="auto"`` is ``1/N``."""

    def __init__(
        self,
        *,
        lr: float | str = AUTO,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        **kwargs: Any,
    ) -> None:
        agg = rules.ASGD(lr=_lr(lr, 1.0), staleness=staleness, max_staleness=max_staleness)
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if lr == AUTO:
            self._auto["lr"] = lambda n: 1.0 / n


class DCASGD(AsyncStrategy):
    """Delay-compensated ASGD, fully asynchronous dispatch; ``lr="auto"`` is ``1/N``."""

    def __init__(
        self,
        *,
        lr: float | str = AUTO,
        lam: float = 0.04,
        adaptive: bool = False,
        lam0: float = 2.0,
        ms_decay: float = 0.95,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        **kwargs: Any,
    ) -> None:
        agg = rules.DCASGD(
            lr=_lr(lr, 1.0),
            lam=lam,
            adaptive=adaptive,
            lam0=lam0,
            ms_decay=ms_decay,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if lr == AUTO:
            self._auto["lr"] = lambda n: 1.0 / n


class FedAsync(AsyncStrategy):
    """FedAsync's convex mix, fully asynchronous; ``proximal_mu`` goes to the clients."""

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        proximal_mu: float = 0.0,
        **kwargs: Any,
    ) -> None:
        agg = rules.FedAsync(alpha=alpha, staleness=staleness, max_staleness=max_staleness)
        if proximal_mu < 0:
            raise ValueError(f"proximal_mu must be >= 0, got {proximal_mu!r}")
        task_config = {**kwargs.pop("task_config", {}), "proximal-mu": float(proximal_mu)}
        super().__init__(aggregator=agg, policy=Asynchronous(), task_config=task_config, **kwargs)


class FedBuff(AsyncStrategy):
    """Buffered asynchronous aggregation; ``buffer_size="auto"`` is ``min(10, N)``."""

    def __init__(
        self,
        *,
        buffer_size: int | str = AUTO,
        lr: float = 1.0,
        server_momentum: float = 0.0,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(buffer_size, str) and buffer_size != AUTO:
            raise ValueError(f"buffer_size must be an integer >= 1 or 'auto', got {buffer_size!r}")
        agg = rules.FedBuff(
            buffer_size=10 if buffer_size == AUTO else buffer_size,
            lr=lr,
            server_momentum=server_momentum,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if buffer_size == AUTO:
            self._auto["buffer_size"] = lambda n: min(10, n)


class GSGM(AsyncStrategy):
    """GSGM: cached, partly averaged gradients with global momentum and a white list.

    ``slack`` is the white list's bound (0: every node once per cycle); ``lr="auto"`` is
    ``(1 - momentum)/N``.
    """

    def __init__(
        self,
        *,
        lr: float | str = AUTO,
        momentum: float = 0.9,
        average_weight: float = 0.5,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        slack: int = 0,
        **kwargs: Any,
    ) -> None:
        agg = rules.GSGM(
            lr=_lr(lr, 0.1),
            momentum=momentum,
            average_weight=average_weight,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=WhiteList(slack), **kwargs)
        if lr == AUTO:
            self._auto["lr"] = lambda n: (1.0 - momentum) / n


class TrendSmooth(AsyncStrategy):
    """Trend-Smooth, fully asynchronous; ``lr="auto"``: sgd ``1/N``, momentum
    ``(1 - beta)/N``, adam ``0.01``."""

    def __init__(
        self,
        *,
        lr: float | str = AUTO,
        base: str = "sgd",
        beta: float = 0.9,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        trend_decay: float = 0.9,
        shrink: float = 0.5,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        **kwargs: Any,
    ) -> None:
        agg = rules.TrendSmooth(
            lr=_lr(lr, 1.0),
            base=base,
            beta=beta,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            trend_decay=trend_decay,
            shrink=shrink,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if lr == AUTO:
            self._auto["lr"] = {
                "sgd": lambda n: 1.0 / n,
                "momentum": lambda n: (1.0 - beta) / n,
                "adam": lambda n: 0.01,
            }[base]


class SSGD(AsyncStrategy):
    """The synchronous baseline: a barrier each step, FedAvg with a server learning rate.

    Every node trains on the same version; the step averages their updates by ``num-examples``
    in node order (bit-reproducible). A node that fails or times out is left out of its step.
    With ``lr=1`` this is FedAvg.
    """

    def __init__(self, *, lr: float = 1.0, **kwargs: Any) -> None:
        super().__init__(aggregator=rules.SSGD(lr=lr), policy=Barrier(), **kwargs)


class ASP(AsyncStrategy):
    """Adaptive synchronous parallel: SSP within the group of fast nodes, slow nodes async.

    Every update goes through ``ASGD(lr, staleness)``; ``lr="auto"`` is ``1/N``.
    """

    def __init__(
        self,
        *,
        lr: float | str = AUTO,
        staleness: StalenessFn | str | None = None,
        max_staleness: int | None = None,
        staleness_bound: int = 2,
        p_min: float = 0.5,
        period: int | None = None,
        **kwargs: Any,
    ) -> None:
        agg = rules.ASGD(lr=_lr(lr, 1.0), staleness=staleness, max_staleness=max_staleness)
        policy = ASPPolicy(staleness_bound=staleness_bound, p_min=p_min, period=period)
        super().__init__(aggregator=agg, policy=policy, **kwargs)
        if lr == AUTO:
            self._auto["lr"] = lambda n: 1.0 / n


class ODSGD(AsyncStrategy):
    """One-step-delay SGD with the server-side compensation (ALGORITHMS.md, "OD-SGD").

    Node ``k``'s iteration ``i`` may start once version ``i - 1`` exists. When the version it
    gets does not contain the node's previous pseudo-gradient yet, its task's base is
    ``w - local_lr * delta_prev``; the update is measured against that base. ``local_lr="auto"``
    is ``lr/N``: the share of its own update the next version will hold (with equal example
    counts). The first ``warmup_steps`` steps run as plain SSGD.
    """

    def __init__(
        self,
        *,
        lr: float = 1.0,
        local_lr: float | str = AUTO,
        warmup_steps: int = 0,
        **kwargs: Any,
    ) -> None:
        start = _lr(local_lr, 0.0, name="local_lr")
        if not start >= 0:  # no aggregator checks this rate
            raise ValueError(f"local_lr must be a number >= 0 or 'auto', got {local_lr!r}")
        super().__init__(aggregator=rules.ODSGD(lr=lr), policy=OneStepDelay(warmup_steps), **kwargs)
        # Measured (benchmarks/RESULTS.md): the whole delta_prev (local_lr=1, ALGORITHMS.md's
        # default) moves a node's base N times too far toward its own data, and costs 7-15 points
        # of accuracy on non-IID splits; lr/N was the best of 0, lr/N and 1.
        self.local_lr = float(start)
        if local_lr == AUTO:
            self._auto["local_lr"] = lambda n: self.aggregator.lr / n
        self.warmup_steps = warmup_steps
        self._previous: dict[int, list[np.ndarray]] = {}

    def _task_base(self, stable_id: int, iteration: int) -> list[np.ndarray] | None:
        previous = self._previous.get(stable_id)
        # Version v contains the updates of iterations 0..v-1.
        if previous is None or self.aggregator.version >= iteration:
            return None
        return [
            w - self.local_lr * d if w.dtype.kind == "f" else w.copy()
            for w, d in zip(self.aggregator.params, previous, strict=True)
        ]

    def _accepted(self, task: _Task, update: ClientUpdate) -> None:
        self._previous[task.stable_id] = [np.array(d, copy=True) for d in update.delta]

    def _joins_barrier(self, task: _Task) -> bool:
        return task.iteration == self.aggregator.version

    def _extra_state(self) -> dict[str, Any]:
        return {"previous": {k: [d.copy() for d in v] for k, v in self._previous.items()}}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self._previous = {int(k): [np.array(d) for d in v] for k, v in state["previous"].items()}
