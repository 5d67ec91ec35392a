"""Aggregation rules: one arriving client update in, a new global model out (docs/algorithms.md).

Every rule has the same interface (docs/algorithms.md, The aggregator interface):
``init(params)``, ``apply(ClientUpdate(...)) -> Outcome``, ``params``, ``version``,
``forget(node_id)``, ``state_dict()`` and ``load_state_dict()``, and the barrier contract
``held``, ``joins_step(base_version, iteration)`` and ``flush()`` for rules that wait for a set
of updates (SSGD, OD-SGD, FedCompass).
"""

from fl_async.aggregators.asgd import ASGD
from fl_async.aggregators.base import (
    APPLIED,
    HELD,
    REJECTED,
    STEPPED,
    Aggregator,
    Outcome,
    Status,
)
from fl_async.aggregators.ca2fl import CA2FL
from fl_async.aggregators.dcasgd import DCASGD
from fl_async.aggregators.fadas import FADAS
from fl_async.aggregators.fedasync import FedAsync
from fl_async.aggregators.fedbuff import FedBuff
from fl_async.aggregators.fedcompass import FedCompass
from fl_async.aggregators.gsgm import GSGM
from fl_async.aggregators.guard import GUARD_FACTOR, TOO_LARGE, UpdateGuard
from fl_async.aggregators.mifa import MIFA
from fl_async.aggregators.odsgd import ODSGD
from fl_async.aggregators.ssgd import SSGD
from fl_async.aggregators.staleness import Constant, Hinge, Polynomial, StalenessFn
from fl_async.aggregators.trend_smooth import TrendSmooth
from fl_async.aggregators.updates import ClientUpdate

AGGREGATORS: dict[str, type[Aggregator]] = {
    cls.name.lower(): cls
    for cls in (
        SSGD,
        ASGD,
        FedAsync,
        FedBuff,
        DCASGD,
        GSGM,
        TrendSmooth,
        ODSGD,
        MIFA,
        CA2FL,
        FADAS,
        FedCompass,
    )
}
"""Every rule by lower-case name (``"gsgm"``, ``"trendsmooth"``, ...)."""

__all__ = [
    "AGGREGATORS",
    "APPLIED",
    "ASGD",
    "CA2FL",
    "DCASGD",
    "FADAS",
    "GSGM",
    "GUARD_FACTOR",
    "HELD",
    "MIFA",
    "ODSGD",
    "REJECTED",
    "SSGD",
    "STEPPED",
    "TOO_LARGE",
    "Aggregator",
    "ClientUpdate",
    "Constant",
    "FedAsync",
    "FedBuff",
    "FedCompass",
    "Hinge",
    "Outcome",
    "Polynomial",
    "StalenessFn",
    "Status",
    "TrendSmooth",
    "UpdateGuard",
]
