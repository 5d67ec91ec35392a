"""The Flower strategies users import: ``AsyncStrategy`` and one preset per algorithm.

Swap one line of an existing ServerApp: ``FedAvg(...)`` becomes ``GSGM(...)``; the ClientApp,
which returns trained weights and ``num-examples`` as usual, needs no change.
"""

from fl_async.aggregators.guard import UpdateGuard
from fl_async.strategies.async_strategy import AsyncStrategy
from fl_async.strategies.checkpoint import CheckpointError, RunSuperseded
from fl_async.strategies.compensation import DelayCompensation, TaskBases
from fl_async.strategies.descendants import CA2FL, FADAS, MIFA
from fl_async.strategies.fedcompass import FedCompass
from fl_async.strategies.presets import (
    ASGD,
    ASP,
    DCASGD,
    GSGM,
    ODSGD,
    SSGD,
    FedAsync,
    FedBuff,
    TrendSmooth,
)
from fl_async.strategies.result import COMPLETED_STOPS, FAILED_STOPS, AsyncResult

PRESETS: dict[str, type[AsyncStrategy]] = {
    cls.__name__.lower(): cls
    for cls in (
        GSGM,
        ASGD,
        TrendSmooth,
        FedAsync,
        FedBuff,
        DCASGD,
        SSGD,
        ODSGD,
        ASP,
        MIFA,
        CA2FL,
        FADAS,
        FedCompass,
    )
}
"""Every preset by lower-case name (``"gsgm"``, ``"fedbuff"``, ...)."""

__all__ = [
    "COMPLETED_STOPS",
    "FAILED_STOPS",
    "ASGD",
    "ASP",
    "CA2FL",
    "DCASGD",
    "FADAS",
    "GSGM",
    "MIFA",
    "ODSGD",
    "PRESETS",
    "SSGD",
    "AsyncResult",
    "AsyncStrategy",
    "CheckpointError",
    "DelayCompensation",
    "RunSuperseded",
    "TaskBases",
    "FedAsync",
    "FedBuff",
    "FedCompass",
    "TrendSmooth",
    "UpdateGuard",
]
