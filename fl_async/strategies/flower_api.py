"""Flower's evaluate messages and their aggregation, for ``AsyncStrategy``'s round-based methods.

``configure_train`` / ``aggregate_train`` build and read the same messages the event loop uses,
so code written against Flower's round-based API (or Flower's own tooling) can drive an
asynchronous strategy one "round" at a time; ``start()`` is the asynchronous way. The
evaluate side is here: what every idle node is sent, and how the replies are averaged.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from fl_async import protocol
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.recorder import Recorder


def evaluate_messages(
    grid: Grid, arrays: ArrayRecord, config: ConfigRecord, busy: set[int]
) -> list[Message]:
    """Evaluation messages for every connected node not in ``busy`` (with a task in flight)."""
    keys = list(arrays.keys())
    model = arrays.to_numpy_ndarrays()
    return [
        protocol.evaluate_message(n, keys, model, dict(config), ttl=3600.0)
        for n in sorted(grid.get_node_ids())
        if n not in busy
    ]


def average_evaluations(
    replies: Iterable[Message], registry: NodeRegistry, recorder: Recorder
) -> MetricRecord | None:
    """The replies' metrics averaged, weighted by ``num-examples`` (as FedAvg does), each count
    capped as a train reply's is; a reply beyond the metric bounds, or with a bad count, is
    left out as ``malformed`` (docs/algorithms.md, What a node claims)."""
    contents = [
        content
        for reply in replies
        if not reply.has_error() and (content := _bounded(reply, registry, recorder)) is not None
    ]
    if not contents:
        return None
    return aggregate_metricrecords(contents, "num-examples")


def _bounded(reply: Message, registry: NodeRegistry, recorder: Recorder) -> RecordDict | None:
    """An evaluate reply's scalar metrics, its ``num-examples`` capped; None if malformed."""
    try:
        protocol.check_metrics(reply)
        metrics = protocol.metrics_of(reply)
        claimed = protocol.check_num_examples(metrics)
    except ValueError as err:
        recorder.fault("malformed", f"evaluate reply of node {reply.metadata.src_node_id}: {err}")
        return None
    node = registry.get(reply.metadata.src_node_id)
    weight = registry.cap.weight(claimed, None if node is None else node.declared)
    return RecordDict({protocol.METRICS_KEY: MetricRecord({**metrics, "num-examples": weight})})
