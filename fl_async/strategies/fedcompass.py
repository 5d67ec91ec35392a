"""FedCompass as a preset: the ``Compass`` policy, which sets each task's ``local-steps``, and
the ``FedCompass`` aggregator, which steps the groups the policy names (docs/algorithms.md,
FedCompass; docs/strategies.md).

The first preset whose policy and aggregator work together: the aggregator takes its steps from
the policy's plan. ``num_nodes`` (``N`` of ``alpha s(tau) / N``) is the number of nodes at start.
"""

from __future__ import annotations

from typing import Any

from fl_async import aggregators as rules
from fl_async.aggregators import StalenessFn
from fl_async.hyperparameters import DECLARATIONS
from fl_async.scheduling import Compass
from fl_async.strategies.async_strategy import AsyncStrategy

_FEDCOMPASS = DECLARATIONS["fedcompass"].defaults


class FedCompass(AsyncStrategy):
    """FedCompass (Li et al., ICLR 2024): nodes get local steps from their measured speed so
    that groups of them arrive together, and each group steps at once.

    ``alpha`` is the server rate, ``staleness`` the weight ``s(tau)`` (default polynomial,
    ``a = 0.5``), ``min_local_steps`` / ``max_local_steps`` the bounds of a task's steps
    (``"auto"``: ``Q_max`` the run's ``local-steps``, else 100; ``Q_min = max(floor(0.2 Q_max),
    1)``), ``speed_momentum`` the weight of a new speed sample, ``latest_time_factor`` how long
    past its expected arrival a group waits (the authors' examples: 0.9, 20, 100, 0.9, 1.5).
    """

    def __init__(
        self,
        *,
        alpha: float = _FEDCOMPASS["alpha"],
        staleness: StalenessFn | str | None = _FEDCOMPASS["staleness"],
        max_staleness: int | None = _FEDCOMPASS["max_staleness"],
        min_local_steps: int | str = _FEDCOMPASS["min_local_steps"],
        max_local_steps: int | str = _FEDCOMPASS["max_local_steps"],
        speed_momentum: float = _FEDCOMPASS["speed_momentum"],
        latest_time_factor: float = _FEDCOMPASS["latest_time_factor"],
        **kwargs: Any,
    ) -> None:
        policy = Compass(
            min_local_steps=min_local_steps,
            max_local_steps=max_local_steps,
            speed_momentum=speed_momentum,
            latest_time_factor=latest_time_factor,
        )
        agg = rules.FedCompass(
            alpha=alpha, staleness=staleness, max_staleness=max_staleness, plan=policy
        )
        super().__init__(aggregator=agg, policy=policy, **kwargs)
        self._auto.append((agg, "num_nodes", lambda n: n))
