"""One strategy per algorithm: an aggregator paired with its dispatch policy.

Each preset is constructible with no arguments. ``lr="auto"`` resolves with N = the number of
nodes at start (docs/algorithms.md, Safe defaults for presets), so that one cycle of N updates moves
about as far as one FedAvg round: ASGD, DCASGD, ASP, TrendSmooth(sgd) and GSGM(sgd) ``1/N``;
GSGM(momentum) and TrendSmooth(momentum) ``(1 - beta)/N``; TrendSmooth(adam) and GSGM(adam)
``0.01``; FedBuff ``buffer_size = min(10, N)``. Three defaults are the claims study's tuned
points instead (benchmarks/RESULTS.md, "Defaults"): DCASGD and TrendSmooth(sgd) ``lr = 0.2``,
FedBuff ``lr = 2``. Every other keyword goes to ``AsyncStrategy`` (``clock=``, ``min_nodes=``,
``eval_every=``, ``checkpoint_dir=``, ...).
"""

from __future__ import annotations

import os
from typing import Any

from fl_async import aggregators as rules
from fl_async.aggregators import StalenessFn
from fl_async.hyperparameters import AUTO, DECLARATIONS, TUNED_LR
from fl_async.scheduling import ASP as ASPPolicy
from fl_async.scheduling import Asynchronous, Barrier, OneStepDelay, WhiteList
from fl_async.strategies.async_strategy import AsyncStrategy
from fl_async.strategies.compensation import DelayCompensation

# Each preset's keyword defaults are its declaration's, stated there once.
_GSGM = DECLARATIONS["gsgm"].defaults
_ASGD = DECLARATIONS["asgd"].defaults
_TRENDSMOOTH = DECLARATIONS["trendsmooth"].defaults
_FEDASYNC = DECLARATIONS["fedasync"].defaults
_FEDBUFF = DECLARATIONS["fedbuff"].defaults
_DCASGD = DECLARATIONS["dcasgd"].defaults
_SSGD = DECLARATIONS["ssgd"].defaults
_ODSGD = DECLARATIONS["odsgd"].defaults
_ASP = DECLARATIONS["asp"].defaults


def auto_value(
    value: float | str, fallback: float, name: str = "lr", allowed: str = "a number >= 0"
) -> float:
    """A starting value: ``fallback`` for ``"auto"`` (resolved at start), else ``value``;
    another string is refused, naming ``allowed``."""
    if isinstance(value, str):
        if value != AUTO:
            raise ValueError(f"{name} must be {allowed} or 'auto', got {value!r}")
        return fallback
    return value


class ASGD(AsyncStrategy):
    """Asynchronous SGD; ``lr="auto"`` is ``1/N``. Dispatch is fully asynchronous, or with
    ``slack=k`` GSGM's white list ``WhiteList(k)``: ASGD paced exactly as GSGM, the control that
    tells GSGM's aggregation from its pacing."""

    def __init__(
        self,
        *,
        lr: float | str = _ASGD["lr"],
        staleness: StalenessFn | str | None = _ASGD["staleness"],
        max_staleness: int | None = _ASGD["max_staleness"],
        slack: int | None = _ASGD["slack"],
        **kwargs: Any,
    ) -> None:
        agg = rules.ASGD(lr=auto_value(lr, 1.0), staleness=staleness, max_staleness=max_staleness)
        policy = Asynchronous() if slack is None else WhiteList(slack)
        super().__init__(aggregator=agg, policy=policy, **kwargs)
        if lr == AUTO:
            self._auto.append((agg, "lr", lambda n: 1.0 / n))


class DCASGD(AsyncStrategy):
    """Delay-compensated ASGD, fully asynchronous dispatch; ``lr`` 0.2 (``TUNED_LR``), or
    ``"auto"``: ``1/N``."""

    def __init__(
        self,
        *,
        lr: float | str = _DCASGD["lr"],
        lam: float = _DCASGD["lam"],
        adaptive: bool = _DCASGD["adaptive"],
        lam0: float = _DCASGD["lam0"],
        ms_decay: float = _DCASGD["ms_decay"],
        staleness: StalenessFn | str | None = _DCASGD["staleness"],
        max_staleness: int | None = _DCASGD["max_staleness"],
        **kwargs: Any,
    ) -> None:
        agg = rules.DCASGD(
            lr=auto_value(lr, 1.0),
            lam=lam,
            adaptive=adaptive,
            lam0=lam0,
            ms_decay=ms_decay,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if lr == AUTO:
            self._auto.append((agg, "lr", lambda n: 1.0 / n))


class FedAsync(AsyncStrategy):
    """FedAsync's convex mix, fully asynchronous; ``proximal_mu`` goes to the clients."""

    def __init__(
        self,
        *,
        alpha: float = _FEDASYNC["alpha"],
        staleness: StalenessFn | str | None = _FEDASYNC["staleness"],
        max_staleness: int | None = _FEDASYNC["max_staleness"],
        proximal_mu: float = _FEDASYNC["proximal_mu"],
        **kwargs: Any,
    ) -> None:
        agg = rules.FedAsync(alpha=alpha, staleness=staleness, max_staleness=max_staleness)
        if proximal_mu < 0:
            raise ValueError(f"proximal_mu must be >= 0, got {proximal_mu!r}")
        task_config = {**kwargs.pop("task_config", {}), "proximal-mu": float(proximal_mu)}
        super().__init__(aggregator=agg, policy=Asynchronous(), task_config=task_config, **kwargs)


class FedBuff(AsyncStrategy):
    """Buffered asynchronous aggregation; ``buffer_size="auto"`` is ``min(10, N)``; ``lr`` 2 (the
    claims study's tuned point). ``combine="median"`` or ``"trimmed-mean"`` (cutting ``trim`` of
    each end) combines the buffer coordinate-wise instead of averaging it: robust to a few
    poisoned updates."""

    def __init__(
        self,
        *,
        buffer_size: int | str = _FEDBUFF["buffer_size"],
        lr: float = _FEDBUFF["lr"],
        server_momentum: float = _FEDBUFF["server_momentum"],
        staleness: StalenessFn | str | None = _FEDBUFF["staleness"],
        max_staleness: int | None = _FEDBUFF["max_staleness"],
        combine: str = _FEDBUFF["combine"],
        trim: float = _FEDBUFF["trim"],
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
            combine=combine,
            trim=trim,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if buffer_size == AUTO:
            self._auto.append((agg, "buffer_size", lambda n: min(10, n)))


class GSGM(AsyncStrategy):
    """GSGM: cached, partly averaged gradients with global momentum and a white list.

    ``slack`` is the white list's bound (0: every node once per cycle). ``schedule="block"``
    (default) enforces it at dispatch (``WhiteList(slack)``); ``schedule="buffer"`` dispatches
    asynchronously and the aggregator holds a node's updates, averaged, until its turn (it is
    told N, the number of nodes at start). ``lr="auto"``: ``server_optimizer="momentum"``
    ``(1 - momentum)/N``, ``"sgd"`` ``1/N``, ``"adam"`` ``0.01`` (as Trend-Smooth's bases).

    The momentum rule keeps ``(1 - momentum)/N``: with ``"cycle"`` a cycle's updates ``c`` (about
    N scheduled gradients) move ``lr * c`` at once and ``lr * beta * u`` at its close, which in
    steady state (``u = c / (1 - beta)``) is ``lr * c / (1 - beta) = c / N``, one FedAvg round
    as with ``"update"``; ``"implicit"`` uses it unchanged, which keeps the preset's scale (its
    ``beta_t <= beta`` only makes the steps smaller).

    ``cache_memory`` bounds the bytes of cached gradients held in memory (None: no limit); the
    nodes beyond it keep theirs in a memory-mapped file in ``cache_dir`` (None: the system's
    temporary directory), with the same results bit for bit.
    """

    def __init__(
        self,
        *,
        lr: float | str = _GSGM["lr"],
        momentum: float = _GSGM["momentum"],
        average_weight: float = _GSGM["average_weight"],
        staleness: StalenessFn | str | None = _GSGM["staleness"],
        max_staleness: int | None = _GSGM["max_staleness"],
        slack: int = _GSGM["slack"],
        server_optimizer: str = _GSGM["server_optimizer"],
        momentum_rule: str = _GSGM["momentum_rule"],
        beta1: float = _GSGM["beta1"],
        beta2: float = _GSGM["beta2"],
        eps: float = _GSGM["eps"],
        schedule: str = _GSGM["schedule"],
        cache_memory: float | None = _GSGM["cache_memory"],
        cache_dir: str | os.PathLike[str] | None = _GSGM["cache_dir"],
        **kwargs: Any,
    ) -> None:
        agg = rules.GSGM(
            lr=auto_value(lr, 0.1),
            momentum=momentum,
            average_weight=average_weight,
            server_optimizer=server_optimizer,
            momentum_rule=momentum_rule,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            schedule=schedule,
            slack=slack,
            cache_memory=cache_memory,
            cache_dir=cache_dir,
            staleness=staleness,
            max_staleness=max_staleness,
        )
        policy = WhiteList(slack) if schedule == "block" else Asynchronous()
        super().__init__(aggregator=agg, policy=policy, **kwargs)
        if lr == AUTO:
            rule = {
                "momentum": lambda n: (1.0 - momentum) / n,
                "sgd": lambda n: 1.0 / n,
                "adam": lambda n: 0.01,
            }[server_optimizer]
            self._auto.append((agg, "lr", rule))
        if schedule == "buffer":
            self._auto.append((agg, "num_nodes", lambda n: n))


class TrendSmooth(AsyncStrategy):
    """Trend-Smooth, fully asynchronous; ``lr=None``: 0.2 with the sgd base (``TUNED_LR``),
    ``"auto"`` with the others; ``lr="auto"``: sgd ``1/N``, momentum ``(1 - beta)/N``, adam
    ``0.01``."""

    def __init__(
        self,
        *,
        lr: float | str | None = _TRENDSMOOTH["lr"],
        base: str = _TRENDSMOOTH["base"],
        beta: float = _TRENDSMOOTH["beta"],
        beta1: float = _TRENDSMOOTH["beta1"],
        beta2: float = _TRENDSMOOTH["beta2"],
        eps: float = _TRENDSMOOTH["eps"],
        trend_decay: float = _TRENDSMOOTH["trend_decay"],
        shrink: float = _TRENDSMOOTH["shrink"],
        staleness: StalenessFn | str | None = _TRENDSMOOTH["staleness"],
        max_staleness: int | None = _TRENDSMOOTH["max_staleness"],
        **kwargs: Any,
    ) -> None:
        if lr is None:  # only the sgd base was tuned; the others keep their "auto" rules
            lr = TUNED_LR if base == "sgd" else AUTO
        agg = rules.TrendSmooth(
            lr=auto_value(lr, 1.0),
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
            rule = {
                "sgd": lambda n: 1.0 / n,
                "momentum": lambda n: (1.0 - beta) / n,
                "adam": lambda n: 0.01,
            }[base]
            self._auto.append((agg, "lr", rule))


class SSGD(AsyncStrategy):
    """The synchronous baseline: a barrier each step, FedAvg with a server learning rate.

    Every node trains on the same version; the step averages their updates by ``num-examples``
    in node order (bit-reproducible). A node that fails or times out is left out of its step.
    With ``lr=1`` this is FedAvg; ``combine="median"`` or ``"trimmed-mean"`` (cutting ``trim``
    of each end), unweighted, is FedMedian or FedTrimmedAvg with a server learning rate.
    """

    def __init__(
        self,
        *,
        lr: float = _SSGD["lr"],
        combine: str = _SSGD["combine"],
        trim: float = _SSGD["trim"],
        **kwargs: Any,
    ) -> None:
        agg = rules.SSGD(lr=lr, combine=combine, trim=trim)
        super().__init__(aggregator=agg, policy=Barrier(), **kwargs)


class ASP(AsyncStrategy):
    """Adaptive synchronous parallel: SSP within the group of fast nodes, slow nodes async.

    Every update goes through ``ASGD(lr, staleness)``; ``lr="auto"`` is ``1/N``.
    """

    def __init__(
        self,
        *,
        lr: float | str = _ASP["lr"],
        staleness: StalenessFn | str | None = _ASP["staleness"],
        max_staleness: int | None = _ASP["max_staleness"],
        staleness_bound: int = _ASP["staleness_bound"],
        p_min: float = _ASP["p_min"],
        period: int | None = _ASP["period"],
        **kwargs: Any,
    ) -> None:
        agg = rules.ASGD(lr=auto_value(lr, 1.0), staleness=staleness, max_staleness=max_staleness)
        policy = ASPPolicy(staleness_bound=staleness_bound, p_min=p_min, period=period)
        super().__init__(aggregator=agg, policy=policy, **kwargs)
        if lr == AUTO:
            self._auto.append((agg, "lr", lambda n: 1.0 / n))


class ODSGD(AsyncStrategy):
    """One-step-delay SGD with the server-side compensation (docs/algorithms.md, OD-SGD).

    Node ``k``'s iteration ``i`` may start once version ``i - 1`` exists. When the version it
    gets does not contain the node's previous pseudo-gradient yet, its task's base is
    ``w - local_lr * delta_prev`` (``DelayCompensation``); the update is measured against that
    base. ``local_lr="auto"`` is ``lr/N``: the share of its own update the next version will
    hold (with equal example counts; why this default, see docs/algorithms.md, OD-SGD). The
    first ``warmup_steps`` steps run as plain SSGD.
    """

    def __init__(
        self,
        *,
        lr: float = _ODSGD["lr"],
        local_lr: float | str = _ODSGD["local_lr"],
        warmup_steps: int = _ODSGD["warmup_steps"],
        **kwargs: Any,
    ) -> None:
        start = auto_value(local_lr, 0.0, name="local_lr")
        if not start >= 0:  # no aggregator checks this rate
            raise ValueError(f"local_lr must be a number >= 0 or 'auto', got {local_lr!r}")
        agg = rules.ODSGD(lr=lr)
        compensation = DelayCompensation(start)
        super().__init__(
            aggregator=agg, policy=OneStepDelay(warmup_steps), task_bases=compensation, **kwargs
        )
        if local_lr == AUTO:
            self._auto.append((compensation, "local_lr", lambda n: agg.lr / n))
        self.warmup_steps = warmup_steps

    @property
    def local_lr(self) -> float:
        """The compensation's rate (``"auto"`` is resolved at start)."""
        return self.task_bases.local_lr
