"""What an asynchronous run returns: Flower's ``Result`` plus faults, budgets and why it stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from flwr.app import MetricRecord
from flwr.serverapp.strategy import Result

COMPLETED_STOPS = frozenset(
    {"budget", "max-wall-time", "max-virtual-time", "target-accuracy", "should-stop"}
)
"""Stop reasons of a run that spent a budget, met its target, or was stopped by ``start()``'s
``should_stop``."""

FAILED_STOPS = frozenset({"no-active-nodes", "no-progress", "deadlock", "no-nodes", "one-node"})
"""Stop reasons of a run that could not make progress: ``no-active-nodes`` (every node left
after failing or being rejected too often in a row), ``no-progress`` (no update accepted for a
bounded number of tasks or span of time), ``deadlock`` (the dispatch policy lets no idle node
start and nothing is in flight), ``no-nodes`` (no node to send a task to within the timeout),
``one-node`` (for ``patience`` replies only one node's updates were accepted while the update
guard refused the others': the run would learn from that node alone)."""


@dataclass
class AsyncResult(Result):
    """Flower's ``Result`` plus what an asynchronous run adds: fault counts and budgets used."""

    faults: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    num_updates: int = 0
    server_steps: int = 0
    virtual_time: float = 0.0
    wall_time: float = 0.0
    evaluate_metrics_grid: dict[int, MetricRecord] = field(default_factory=dict)
    """Evaluations at the virtual-time grid (``eval_grid``), keyed by grid index 1..G."""
    stopped_by: str = ""
    stop_detail: str = ""
    """Why the run stopped, in words (which nodes left and why, for a failed stop)."""

    @property
    def completed(self) -> bool:
        """Whether the run ended by a budget or its target, not for want of progress."""
        return self.stopped_by in COMPLETED_STOPS
