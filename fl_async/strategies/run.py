"""One run's state: its model and version, nodes, tasks in flight, time and records.

``AsyncStrategy`` makes a ``Run`` afresh at each ``start()`` and hands it to its collaborators
(membership, dispatch, reply handling, boundaries, snapshots): what more than one of them reads
or changes is here, in one place; what only one of them needs is that one's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from fl_async import protocol
from fl_async.aggregators import Aggregator
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.order import ReplyOrder
from fl_async.strategies.outbox import Outbox
from fl_async.strategies.recorder import Recorder
from fl_async.strategies.tasks import Task, TaskBook

NODE_WAIT = 0.2
"""The longest wait (seconds) between looks at the grid while nothing can be sent."""


def node_wait(poll_interval: float) -> float:
    """The wait between looks at the grid while waiting for nodes: ten poll intervals, at most
    ``NODE_WAIT`` (0.2 s from the default 0.02-s poll interval up)."""
    return min(NODE_WAIT, 10 * poll_interval)


@dataclass
class Run:
    """The state one run of the event loop shares between its collaborators."""

    rule: Aggregator
    """The update rule, which holds the global model (``params``) and its ``version``."""
    registry: NodeRegistry
    """The nodes of the run."""
    book: TaskBook
    """The tasks in flight, their stashed replies and their bases."""
    outbox: Outbox
    """The tasks made: held back or sent."""
    order: ReplyOrder
    """Which reply comes next, and the run's virtual time (``order.now``)."""
    recorder: Recorder
    """The history, faults and counters."""
    timeout: float
    """Each task's TTL and the longest wait (``start()``'s ``timeout``)."""
    max_wall_time: float | None = None
    node_wait: float = NODE_WAIT
    """Seconds between looks at the grid while nothing can be sent (waiting for nodes): ten
    poll intervals, at most 0.2 s (``node_wait``)."""
    keys: list[str] = field(default_factory=list)
    """The names of the model's arrays (``initial_arrays``' keys)."""
    train_config: dict[str, Any] = field(default_factory=dict)
    """``start()``'s ``train_config``: sent with every task."""
    forget_at: dict[int, int] = field(default_factory=dict)
    """Stable id -> the server step at which the rule forgets that departed node."""
    model_bytes: int = 1
    eval_every: int = 1
    """Server steps between central evaluations, as resolved at the start."""
    patience: int = 1
    """Tasks in a row without an accepted update before ``no-progress``, as resolved."""
    stop_detail: str = ""
    """Why the run stops, in words (set with the stop reason)."""
    started: bool = False
    """Whether the model was initialised (``start()`` or Flower's ``configure_train``)."""

    @property
    def version(self) -> int:
        """The global model's version: the server steps taken."""
        return self.rule.version

    def record(self, arrays: list[np.ndarray]) -> ArrayRecord:
        """``arrays`` as an ArrayRecord under the model's keys."""
        return protocol.to_record(self.keys, arrays)

    def model_record(self) -> ArrayRecord:
        """The global model as an ArrayRecord."""
        return self.record(self.rule.params)

    def close(self, key: str) -> tuple[Task, list[np.ndarray]]:
        """Take a task out of the book and the outbox (answered, timed out, lost or unsent)."""
        self.outbox.forget(key)
        return self.book.close(key)

    def wall_time_left(self) -> float:
        """Seconds until the run's ``max_wall_time`` (infinite without one)."""
        limit = self.max_wall_time
        return math.inf if limit is None else limit - self.recorder.wall()

    def out_of_wall_time(self) -> bool:
        """Whether the run's ``max_wall_time`` has passed (also checked while waiting)."""
        return self.wall_time_left() <= 0
