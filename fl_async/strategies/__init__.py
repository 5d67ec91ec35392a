"""The Flower strategies users import: ``AsyncStrategy`` and one preset per algorithm.

Swap one line of an existing ServerApp: ``FedAvg(...)`` becomes ``GSGM(...)``; the ClientApp,
which returns trained weights and ``num-examples`` as usual, needs no change.
"""

from fl_async.aggregators.guard import UpdateGuard
from fl_async.hyperparameters import DECLARATIONS
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


def _presets() -> dict[str, type[AsyncStrategy]]:
    """Each declared rule's preset, found among the classes this package exports."""
    exported = {
        name: value
        for name, value in globals().items()
        if isinstance(value, type) and issubclass(value, AsyncStrategy)
    }
    missing = [d.preset for d in DECLARATIONS.values() if d.preset not in exported]
    if missing:  # a rule declared but its preset not exported here
        raise ImportError(f"fl_async.strategies exports no class {missing} that a rule declares")
    return {name: exported[d.preset] for name, d in DECLARATIONS.items()}


PRESETS: dict[str, type[AsyncStrategy]] = _presets()
"""Every preset by lower-case name (``"gsgm"``, ``"fedbuff"``, ...), in its declarations' order
(``fl_async.hyperparameters.DECLARATIONS``)."""

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
