"""Who may train next and when: dispatch policies, the virtual clock, node speeds and traces.

Pure numpy, no Flower: the event loop in ``fl_async.strategies`` combines a policy, a clock and a
``TaskQueue``. See docs/scheduling.md, and docs/algorithms.md for the rules (Dispatch policies,
OD-SGD, GSGM, FedCompass, Virtual clock).
"""

from fl_async.scheduling.clock import JITTER_STREAM, PROFILE_STREAM, NodeProfile, VirtualClock
from fl_async.scheduling.compass import Compass
from fl_async.scheduling.policies import (
    ASP,
    SSP,
    Asynchronous,
    Barrier,
    DispatchPolicy,
    OneStepDelay,
    WhiteList,
)
from fl_async.scheduling.ranking import ranking_by_classes, ranking_by_labels
from fl_async.scheduling.speeds import SPEED_MODELS, LogNormal, Pareto, SpeedModel, Trace, Uniform
from fl_async.scheduling.tasks import TaskQueue
from fl_async.scheduling.traces import (
    BYTES_PER_KBIT,
    DeviceCapacity,
    FedScaleTrace,
    load_fedscale_trace,
    save_fedscale_trace,
)

__all__ = [
    "ASP",
    "BYTES_PER_KBIT",
    "JITTER_STREAM",
    "PROFILE_STREAM",
    "SPEED_MODELS",
    "SSP",
    "Asynchronous",
    "Barrier",
    "Compass",
    "DeviceCapacity",
    "DispatchPolicy",
    "FedScaleTrace",
    "LogNormal",
    "NodeProfile",
    "OneStepDelay",
    "Pareto",
    "SpeedModel",
    "TaskQueue",
    "Trace",
    "Uniform",
    "VirtualClock",
    "WhiteList",
    "load_fedscale_trace",
    "ranking_by_classes",
    "ranking_by_labels",
    "save_fedscale_trace",
]
