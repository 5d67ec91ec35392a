"""``strategy = "flwr-fedavg"``: Flower's own ``FedAvg``, run as a Flower user would run it.

Not one of fl-async's presets: a baseline to compare them with. The ServerApp hands Flower's
``FedAvg.start`` the same initial model, training settings and central evaluation as a preset,
``num-rounds`` rounds of every node, and records the run in the presets' history format (one
evaluation per round with its wall time, one update per reply with staleness 0), so that
``history.json`` and the plots read alike. Flower's loop has no virtual clock and no other
budget: the run config must say ``clock.type = "real"`` and leave the other budgets off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from fl_async.protocol import METRICS_KEY
from fl_async.strategies import AsyncResult
from fl_async.validation import InvalidArgument

FLOWER_FEDAVG = "flwr-fedavg"
"""The run config's ``strategy`` value that runs Flower's ``FedAvg``."""

UNSUPPORTED_KEYS: tuple[str, ...] = (
    "max-updates",
    "max-virtual-time",
    "max-wall-time",
    "target-accuracy",
    "eval-every",
    "eval-grid",
    "max-in-flight",
    "send-ahead",
    "checkpoint-every",
)
"""Run-config keys that Flower's ``FedAvg`` loop has no counterpart for (0: off is required)."""

NODE_WAIT_POLL = 1.0
"""Seconds between two looks for connected nodes before the first round."""


def check_flower_fedavg(values: Mapping[str, object]) -> None:
    """Refuse a run config that ``flwr-fedavg`` cannot honour, naming the key and its value."""
    if values["clock.type"] != "real":
        raise InvalidArgument(
            f"strategy {FLOWER_FEDAVG!r} needs clock.type = 'real' (Flower's FedAvg has no "
            f"virtual clock), got {values['clock.type']!r}"
        )
    for key in UNSUPPORTED_KEYS:
        if values[key]:
            raise InvalidArgument(
                f"strategy {FLOWER_FEDAVG!r} runs num-rounds rounds of Flower's own loop: run "
                f"config {key!r} must be 0 (off), got {values[key]!r}"
            )


class RecordingFedAvg(FedAvg):
    """Flower's ``FedAvg``, unchanged, that also notes every train reply with its wall time."""

    def __init__(self, *, wall: Callable[[], float], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.wall = wall
        self.updates: list[dict[str, float | int]] = []
        self.errors = 0

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Note each reply (node, round, wall time, its metrics), then FedAvg's own aggregation."""
        replies = list(replies)
        now = self.wall()
        for reply in replies:
            if reply.has_error():
                self.errors += 1
                continue
            metrics = reply.content.metric_records.get(METRICS_KEY, MetricRecord())
            numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            self.updates.append(
                {
                    **numbers,
                    "node-id": reply.metadata.src_node_id,
                    "server-step": server_round,
                    "staleness": 0,
                    "accepted": 1,
                    "virtual-time": now,
                    "wall-time": now,
                }
            )
        return super().aggregate_train(server_round, replies)


def run_flower_fedavg(
    grid: Grid,
    initial: ArrayRecord,
    *,
    num_nodes: int,
    num_rounds: int,
    timeout: float,
    train_config: ConfigRecord,
    evaluate_fn: Callable[[int, ArrayRecord], MetricRecord],
    federated_evaluation: bool = False,
) -> AsyncResult:
    """Flower's ``FedAvg`` over all ``num_nodes`` nodes for ``num_rounds`` rounds: waits at most
    ``timeout`` seconds for the nodes to connect (Flower's own wait has no bound), then runs
    ``FedAvg.start``; its result as an ``AsyncResult`` whose evaluations carry the wall time
    (seconds since the start) and the number of updates applied by then."""
    started = time.monotonic()

    def wall() -> float:
        return time.monotonic() - started

    _wait_for_nodes(grid, num_nodes, timeout)
    strategy = RecordingFedAvg(
        wall=wall,
        fraction_train=1.0,
        fraction_evaluate=1.0 if federated_evaluation else 0.0,
        min_train_nodes=num_nodes,
        min_evaluate_nodes=num_nodes if federated_evaluation else 0,
        min_available_nodes=num_nodes,
    )

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        metrics = evaluate_fn(server_round, arrays)
        now = wall()
        updates = len(strategy.updates)
        return MetricRecord(
            {**dict(metrics), "virtual-time": now, "wall-time": now, "num-updates": updates}
        )

    flower = strategy.start(
        grid,
        initial,
        num_rounds=num_rounds,
        timeout=timeout,
        train_config=train_config,
        evaluate_fn=evaluate,
    )
    result = _as_result(flower, strategy, num_rounds, wall)
    log(INFO, "fl-async: Flower's FedAvg, %d rounds, %d updates", num_rounds, result.num_updates)
    return result


def _as_result(
    flower: Result, strategy: RecordingFedAvg, num_rounds: int, wall: Callable[[], float]
) -> AsyncResult:
    """FedAvg's ``Result`` and what ``strategy`` recorded, as an ``AsyncResult`` (times from
    ``wall``)."""
    return AsyncResult(
        arrays=flower.arrays,
        train_metrics_clientapp={k + 1: MetricRecord(u) for k, u in enumerate(strategy.updates)},
        evaluate_metrics_clientapp=dict(flower.evaluate_metrics_clientapp),
        evaluate_metrics_serverapp=dict(flower.evaluate_metrics_serverapp),
        faults={"error": strategy.errors} if strategy.errors else {},
        num_updates=len(strategy.updates),
        server_steps=num_rounds,
        virtual_time=wall(),
        wall_time=wall(),
        stopped_by="budget",
        stop_detail=f"Flower's FedAvg ran its {num_rounds} rounds",
    )


def _wait_for_nodes(grid: Grid, num_nodes: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(list(grid.get_node_ids())) < num_nodes:
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"strategy {FLOWER_FEDAVG!r}: fewer than num-nodes = {num_nodes} nodes "
                f"connected within timeout = {timeout} s"
            )
        time.sleep(NODE_WAIT_POLL)
