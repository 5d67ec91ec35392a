"""Aggregation rules: one arriving client update in, a new global model out (ALGORITHMS.md).

Every rule has the same interface: ``init(params)``, ``apply(ClientUpdate(...)) -> bool``,
``params``, ``version``, ``forget(node_id)``, ``state_dict()`` and ``load_state_dict()``.
"""

from fl_async.aggregators.asgd import ASGD
from fl_async.aggregators.base import Aggregator, ClientUpdate
from fl_async.aggregators.dcasgd import DCASGD
from fl_async.aggregators.fedasync import FedAsync
from fl_async.aggregators.fedbuff import FedBuff
from fl_async.aggregators.gsgm import GSGM
from fl_async.aggregators.odsgd import ODSGD
from fl_async.aggregators.ssgd import SSGD
from fl_async.aggregators.staleness import Constant, Hinge, Polynomial, StalenessFn
from fl_async.aggregators.trend_smooth import TrendSmooth

AGGREGATORS: dict[str, type[Aggregator]] = {
    cls.name.lower(): cls
    for cls in (SSGD, ASGD, FedAsync, FedBuff, DCASGD, GSGM, TrendSmooth, ODSGD)
}
"""Every rule by lower-case name (``"gsgm"``, ``"trendsmooth"``, ...)."""

__all__ = [
    "AGGREGATORS",
    "ASGD",
    "DCASGD",
    "GSGM",
    "ODSGD",
    "SSGD",
    "Aggregator",
    "ClientUpdate",
    "Constant",
    "FedAsync",
    "FedBuff",
    "Hinge",
    "Polynomial",
    "StalenessFn",
    "TrendSmooth",
]
