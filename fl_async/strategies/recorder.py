"""The recorder: what a run keeps for its ``Result``: update records, evaluations, faults.

``train_metrics_clientapp`` is keyed by the running index of handled replies (1, 2, ...); each
record holds ``server-step``, ``node-id``, ``stable-id``, ``staleness``, ``iteration``,
``virtual-time``, ``wall-time``, ``accepted`` and the client's own metrics.
``evaluate_metrics_serverapp`` is keyed by server step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from logging import INFO, WARNING

from flwr.app import ArrayRecord, MetricRecord
from flwr.common.logger import log

from fl_async import protocol
from fl_async.strategies.result import AsyncResult


class Recorder:
    """History, faults and counters of one run; ``finish`` turns them into an ``AsyncResult``."""

    def __init__(self) -> None:
        self.result = AsyncResult()
        self.faults: dict[str, int] = {}
        self.num_updates = 0
        """Accepted updates (the budget counts these)."""
        self.num_replies = 0
        self.since_progress = 0
        """Tasks ended (answered or dropped) since the last accepted update."""
        self.last_eval_step = -1
        self.wall_start = time.time()
        self.wall_before = 0.0
        """Seconds a resumed run had run up to its checkpoint, in the runs before it: its wall
        times go on from there."""

    def wall(self) -> float:
        """Seconds since this run started (what ``max_wall_time`` counts)."""
        return time.time() - self.wall_start

    def wall_at(self, moment: float) -> float:
        """The run's wall time at ``moment`` (a ``time.time()``): its seconds since it started,
        resumed or not, and those before its checkpoint in the runs it resumes."""
        return self.wall_before + moment - self.wall_start

    def elapsed(self) -> float:
        """The run's wall time now (``wall_at`` now)."""
        return self.wall_at(time.time())

    def fault(self, kind: str, message: str) -> None:
        """Count and log a fault of ``kind``."""
        self.faults[kind] = self.faults.get(kind, 0) + 1
        log(WARNING, "fault (%s): %s", kind, message)

    def task_failed(self) -> None:
        """A task ended without a reply to read (error, malformed, timed out, lost)."""
        self.since_progress += 1

    def reply(self, values: Mapping[str, object], *, accepted: bool) -> MetricRecord:
        """Record one handled reply (``values``: the client's metrics and the loop's fields)."""
        if accepted:
            self.num_updates += 1
            self.since_progress = 0
        else:
            self.since_progress += 1
        self.num_replies += 1
        record = protocol.metric_record({**values, "accepted": accepted})
        self.result.train_metrics_clientapp[self.num_replies] = record
        return record

    def evaluation(self, version: int, metrics: MetricRecord, *, now: float, when: str) -> None:
        """Record a central evaluation of server step ``version`` and log it."""
        record = protocol.metric_record(
            {
                **dict(metrics),
                "virtual-time": now,
                "wall-time": self.elapsed(),
                "num-updates": self.num_updates,
            }
        )
        self.result.evaluate_metrics_serverapp[version] = record
        shown = ", ".join(f"{k}={v:.4g}" for k, v in dict(metrics).items())
        log(INFO, "step %d | %s | %s", version, when, shown)

    def grid_evaluation(self, index: int, at: float, version: int, metrics: MetricRecord) -> None:
        """Record the evaluation of grid point ``index`` (virtual time ``at``), where the model
        in force was server step ``version``."""
        self.result.evaluate_metrics_grid[index] = protocol.metric_record(
            {
                **dict(metrics),
                "virtual-time": at,
                "server-step": version,
                "wall-time": self.elapsed(),
                "num-updates": self.num_updates,
            }
        )

    def evaluated(self, version: int) -> bool:
        """Whether server step ``version`` has been evaluated."""
        return version in self.result.evaluate_metrics_serverapp

    def reached(self, target: float, metric: str) -> bool:
        """Whether the latest evaluation's ``metric`` is at least ``target``."""
        evaluations = self.result.evaluate_metrics_serverapp
        if not evaluations:
            return False
        value = evaluations[max(evaluations)].get(metric)
        return value is not None and float(value) >= target

    def finish(
        self,
        stop: str,
        detail: str,
        arrays: ArrayRecord,
        *,
        rejected: dict[str, int],
        server_steps: int,
        now: float,
    ) -> AsyncResult:
        """The ``AsyncResult`` of the run, logged in one line."""
        result = self.result
        result.arrays = arrays
        result.faults = dict(self.faults)
        result.rejected = dict(rejected)
        result.num_updates = self.num_updates
        result.server_steps = server_steps
        result.virtual_time = now
        result.wall_time = self.elapsed()
        result.stopped_by = stop
        result.stop_detail = detail
        log(
            INFO if result.completed else WARNING,
            "Finished (%s%s): %d updates, %d server steps, virtual time %.1f, wall time %.1f s, "
            "faults %s, rejected %s",
            stop,
            f": {detail}" if detail else "",
            result.num_updates,
            result.server_steps,
            result.virtual_time,
            result.wall_time,
            result.faults,
            result.rejected,
        )
        return result
