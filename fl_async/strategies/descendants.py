"""GSGM's descendants as presets: MIFA, CA2FL and FADAS, each with fully asynchronous dispatch
(docs/algorithms.md; docs/strategies.md).

``"auto"`` resolves with N = the number of nodes at start: MIFA's ``lr`` is ``1/N`` (each update
steps with an average over all N nodes, so a cycle of N updates then moves as far as one FedAvg
round), CA2FL's ``buffer_size`` is ``min(10, N)`` with ``lr = 1`` (FedBuff's), FADAS's
``buffer_size`` ``min(5, N)`` (its authors' buffer of 5). MIFA and CA2FL are told N
(``num_nodes``): the average counts a node not heard from yet as zero.
"""

from __future__ import annotations

import os
from typing import Any

from fl_async import aggregators as rules
from fl_async.hyperparameters import DECLARATIONS
from fl_async.scheduling import Asynchronous
from fl_async.strategies.async_strategy import AsyncStrategy
from fl_async.strategies.presets import AUTO, auto_value

# Each preset's keyword defaults are its declaration's, stated there once.
_MIFA = DECLARATIONS["mifa"].defaults
_CA2FL = DECLARATIONS["ca2fl"].defaults
_FADAS = DECLARATIONS["fadas"].defaults


class MIFA(AsyncStrategy):
    """MIFA: every update steps with the average of all N nodes' latest pseudo-gradients.

    ``lr="auto"`` is ``1/N``. ``warmup=True`` takes no step until every node has reported once;
    ``lr_schedule="inverse"`` uses ``lr / (t + 1)``. ``cache_memory`` / ``cache_dir``: GSGM's
    gradient cache (memory budget, spill to disk).
    """

    def __init__(
        self,
        *,
        lr: float | str = _MIFA["lr"],
        warmup: bool = _MIFA["warmup"],
        lr_schedule: str = _MIFA["lr_schedule"],
        max_staleness: int | None = _MIFA["max_staleness"],
        cache_memory: float | None = _MIFA["cache_memory"],
        cache_dir: str | os.PathLike[str] | None = _MIFA["cache_dir"],
        **kwargs: Any,
    ) -> None:
        agg = rules.MIFA(
            lr=auto_value(lr, 1.0, "lr", "a number"),
            warmup=warmup,
            lr_schedule=lr_schedule,
            max_staleness=max_staleness,
            cache_memory=cache_memory,
            cache_dir=cache_dir,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        self._auto.append((agg, "num_nodes", lambda n: n))
        if lr == AUTO:
            self._auto.append((agg, "lr", lambda n: 1.0 / n))


class CA2FL(AsyncStrategy):
    """CA2FL: FedBuff's buffer with cached update calibration; ``buffer_size="auto"`` is
    ``min(10, N)``. ``cache_memory`` / ``cache_dir``: GSGM's gradient cache."""

    def __init__(
        self,
        *,
        buffer_size: int | str = _CA2FL["buffer_size"],
        lr: float = _CA2FL["lr"],
        max_staleness: int | None = _CA2FL["max_staleness"],
        cache_memory: float | None = _CA2FL["cache_memory"],
        cache_dir: str | os.PathLike[str] | None = _CA2FL["cache_dir"],
        **kwargs: Any,
    ) -> None:
        agg = rules.CA2FL(
            buffer_size=auto_value(buffer_size, 10, "buffer_size", "a number"),
            lr=lr,
            max_staleness=max_staleness,
            cache_memory=cache_memory,
            cache_dir=cache_dir,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        self._auto.append((agg, "num_nodes", lambda n: n))
        if buffer_size == AUTO:
            self._auto.append((agg, "buffer_size", lambda n: min(10, n)))


class FADAS(AsyncStrategy):
    """FADAS: buffered AMSGrad with a delay-adaptive rate; ``buffer_size="auto"`` is
    ``min(5, N)``. ``delay_rule``: ``"inverse"`` (``lr / tau_max`` past ``tau_c``),
    ``"capped"`` (``min(lr, 1 / tau_max)``) or ``"none"``."""

    def __init__(
        self,
        *,
        buffer_size: int | str = _FADAS["buffer_size"],
        lr: float = _FADAS["lr"],
        beta1: float = _FADAS["beta1"],
        beta2: float = _FADAS["beta2"],
        eps: float = _FADAS["eps"],
        tau_c: int = _FADAS["tau_c"],
        delay_rule: str = _FADAS["delay_rule"],
        bias_correction: bool = _FADAS["bias_correction"],
        max_staleness: int | None = _FADAS["max_staleness"],
        **kwargs: Any,
    ) -> None:
        agg = rules.FADAS(
            buffer_size=auto_value(buffer_size, 5, "buffer_size", "a number"),
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            tau_c=tau_c,
            delay_rule=delay_rule,
            bias_correction=bias_correction,
            max_staleness=max_staleness,
        )
        super().__init__(aggregator=agg, policy=Asynchronous(), **kwargs)
        if buffer_size == AUTO:
            self._auto.append((agg, "buffer_size", lambda n: min(5, n)))
