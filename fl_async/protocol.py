"""The message protocol between the asynchronous ServerApp and ClientApps, in one place.

Task (server -> node), message type ``train``: an ArrayRecord ``arrays`` (the base model) and a
ConfigRecord ``config`` with ``server-step`` (the base version), ``server-round`` (the same + 1,
for apps written for FedAvg), ``task-seed`` (the seed the ClientApp uses for this task),
``iteration`` (the node's task count) and the training settings of ``train_config``.

Reply (node -> server): FedAvg's contract, one ArrayRecord of trained weights and a MetricRecord
with ``num-examples``; optionally ``partition-id`` and any training metrics. A ClientApp that
computes its own pseudo-gradient (``base - trained``) may send it as an ArrayRecord under
``pseudo-gradient`` instead of the trained weights.

Identification (server -> node), message type ``query`` with ConfigRecord ``config`` holding
``fl-async = "identify"``: the reply's MetricRecord carries ``partition-id`` (and optionally
``num-examples``). It gives every node a stable identity, since simulated node ids are random per
run. A ClientApp without a query handler simply answers with an error and keeps its node id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

TRAIN = "train"
EVALUATE = "evaluate"
QUERY = "query"
ARRAYS_KEY = "arrays"
CONFIG_KEY = "config"
METRICS_KEY = "metrics"
PSEUDO_GRADIENT_KEY = "pseudo-gradient"
IDENTIFY = {"fl-async": "identify"}


@dataclass(frozen=True)
class Reply:
    """What a train reply carried: trained weights or a pseudo-gradient, and its metrics."""

    arrays: list[np.ndarray]
    is_pseudo_gradient: bool
    metrics: dict[str, int | float]

    @property
    def num_examples(self) -> int:
        return int(self.metrics.get("num-examples", 0))


def to_record(keys: Sequence[str], arrays: Sequence[np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with ``keys`` (the model's own names) over ``arrays``."""
    record = ArrayRecord()
    for key, array in zip(keys, arrays, strict=True):
        # np.asarray, not np.ascontiguousarray, which turns a 0-d array (BatchNorm's
        # num_batches_tracked) into shape (1,), a shape the model then refuses.
        record[key] = Array.from_numpy_ndarray(np.asarray(array, order="C"))
    return record


def train_message(
    node_id: int,
    model: ArrayRecord,
    config: Mapping[str, object],
    *,
    ttl: float,
) -> Message:
    """The task for one node: the base model (one record, shared by every task of a version:
    serialised once) and the task's own config."""
    content = RecordDict({ARRAYS_KEY: model, CONFIG_KEY: ConfigRecord(dict(config))})
    return Message(content, dst_node_id=node_id, message_type=TRAIN, ttl=ttl)


def query_message(node_id: int, *, ttl: float) -> Message:
    """Ask a node for its ``partition-id`` (and ``num-examples``)."""
    content = RecordDict({CONFIG_KEY: ConfigRecord(dict(IDENTIFY))})
    return Message(content, dst_node_id=node_id, message_type=QUERY, ttl=ttl)


def evaluate_message(
    node_id: int, keys: Sequence[str], model: Sequence[np.ndarray], config: Mapping[str, object],
    *, ttl: float,
) -> Message:  # fmt: skip
    """Federated evaluation of ``model`` on one node."""
    content = RecordDict(
        {ARRAYS_KEY: to_record(keys, model), CONFIG_KEY: ConfigRecord(dict(config))}
    )
    return Message(content, dst_node_id=node_id, message_type=EVALUATE, ttl=ttl)


def metrics_of(message: Message) -> dict[str, int | float]:
    """All scalar metrics of a reply, merged over its MetricRecords."""
    merged: dict[str, int | float] = {}
    for record in message.content.metric_records.values():
        for key, value in record.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = value
    return merged


def read_train_reply(message: Message) -> Reply:
    """Parse a train reply; raise ValueError (with what was found) when it breaks the contract."""
    records = message.content.array_records
    metrics = metrics_of(message)
    if PSEUDO_GRADIENT_KEY in records:
        return Reply(records[PSEUDO_GRADIENT_KEY].to_numpy_ndarrays(), True, metrics)
    if ARRAYS_KEY in records:
        return Reply(records[ARRAYS_KEY].to_numpy_ndarrays(), False, metrics)
    if len(records) == 1:
        return Reply(next(iter(records.values())).to_numpy_ndarrays(), False, metrics)
    raise ValueError(
        f"a train reply must carry one ArrayRecord (or '{PSEUDO_GRADIENT_KEY}'), "
        f"got {sorted(records)}"
    )


def metric_record(values: Mapping[str, object]) -> MetricRecord:
    """A MetricRecord of the numeric values (numpy scalars cast: MetricRecord rejects them)."""
    clean: dict[str, int | float] = {}
    for key, value in values.items():
        if isinstance(value, (bool, np.bool_)):
            clean[key] = int(value)
        elif isinstance(value, (int, np.integer)):
            clean[key] = int(value)
        elif isinstance(value, (float, np.floating)):
            clean[key] = float(value)
    return MetricRecord(clean)
