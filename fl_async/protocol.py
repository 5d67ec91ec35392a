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

Run settings (server -> node, in any message of a study, where one simulation serves many runs):
a ConfigRecord ``run-settings`` holding the run's node keys (dataset, split, model, seed,
training settings: ``fl_async.config.NODE_KEYS``); the ClientApp reads them in place of its
own run config.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode, SType
from numpy.lib import format as npy

TRAIN = "train"
EVALUATE = "evaluate"
QUERY = "query"
ARRAYS_KEY = "arrays"
CONFIG_KEY = "config"
METRICS_KEY = "metrics"
PSEUDO_GRADIENT_KEY = "pseudo-gradient"
IDENTIFY = {"fl-async": "identify"}
RUN_SETTINGS_KEY = "run-settings"
"""The ConfigRecord of a study's message that carries its run's node settings."""
MAX_NUM_EXAMPLES = 2**53
"""The largest ``num-examples`` a reply may declare: the largest count a float holds exactly."""
MAX_METRICS = 64
"""The most metrics a train reply may carry, over all its MetricRecords (a list metric counts
one per value): the history keeps every reply's numbers. fl-async's ClientApp sends 8."""
MAX_METRIC_NAME = 100
"""The longest name, in characters, of a metric in a train reply."""
UNDELIVERED = {
    ErrorCode.MESSAGE_UNAVAILABLE: "timeout",
    ErrorCode.REPLY_MESSAGE_UNAVAILABLE: "timeout",
    ErrorCode.NODE_UNAVAILABLE: "lost",
}
"""Flower's error codes for a reply the SuperLink wrote itself, the node never having answered
(past the TTL: ``timeout``; a node whose heartbeat stopped: ``lost``), and the fault each names."""
_NUMERIC = frozenset("biuf")
_HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}


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
    node_id: int,
    keys: Sequence[str],
    model: Sequence[np.ndarray],
    config: Mapping[str, object],
    *,
    ttl: float,
) -> Message:
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
    """Parse a train reply; raise ValueError (with what was found) when it breaks the contract:
    no model, an array that is not a numeric numpy array, a bad ``num-examples``, or metrics
    beyond ``MAX_METRICS`` or ``MAX_METRIC_NAME``."""
    records = message.content.array_records
    check_metrics(message)
    metrics = metrics_of(message)
    check_num_examples(metrics)
    if PSEUDO_GRADIENT_KEY in records:
        return Reply(decode_arrays(records[PSEUDO_GRADIENT_KEY]), True, metrics)
    if ARRAYS_KEY in records:
        return Reply(decode_arrays(records[ARRAYS_KEY]), False, metrics)
    if len(records) == 1:
        return Reply(decode_arrays(next(iter(records.values()))), False, metrics)
    raise ValueError(
        f"a train reply must carry one ArrayRecord (or '{PSEUDO_GRADIENT_KEY}'), "
        f"got {sorted(records)}"
    )


def check_metrics(message: Message) -> None:
    """Raise ValueError, naming the bound, when ``message``'s metrics number more than
    ``MAX_METRICS`` (a list counting one per value) or one's name is longer than
    ``MAX_METRIC_NAME``. The count is taken before any metric is read: a reply with 100,000
    of them costs a length per record."""
    records = message.content.metric_records.values()
    count = sum(len(record) for record in records)
    if count <= MAX_METRICS:
        for record in records:
            for name, value in record.items():
                count += len(value) - 1 if isinstance(value, list) else 0
                if len(name) > MAX_METRIC_NAME:
                    raise ValueError(
                        f"metric name {name[:20]!r}... has {len(name)} characters; "
                        f"at most {MAX_METRIC_NAME} are allowed"
                    )
    if count > MAX_METRICS:
        raise ValueError(
            f"a reply carries {count} metric values; at most {MAX_METRICS} are "
            "allowed (a list counts one per value)"
        )


def check_num_examples(metrics: Mapping[str, int | float]) -> int:
    """``num-examples`` of ``metrics`` (0 when absent); ValueError unless a whole number in
    [0, 2**53]."""
    value = metrics.get("num-examples", 0)
    count = _whole(value)
    if count is None:
        raise ValueError(f"num-examples must be a whole number in [0, 2**53], got {value!r}")
    return count


def decode_arrays(record: ArrayRecord) -> list[np.ndarray]:
    """The arrays of a received ``record``, each checked before it is allocated: a numpy
    ``.npy`` payload of a numeric dtype whose header's shape matches the bytes that came. A
    header that declares more than came (say 10**12 elements in a few bytes) is refused
    without allocating it; ValueError names the array and what is wrong."""
    return [_decode(key, array) for key, array in record.items()]


def _decode(key: str, array: Array) -> np.ndarray:
    if array.stype != SType.NUMPY:
        raise ValueError(f"array {key!r} has serialisation {array.stype!r}, not {SType.NUMPY!r}")
    data = array.data if isinstance(array.data, bytes) else b""
    stream = io.BytesIO(data)
    try:
        version = npy.read_magic(stream)
        header = _HEADER_READERS.get(version)
        if header is None:
            raise ValueError(f"format version {version}; numeric arrays use 1.0 or 2.0")
        shape, _, dtype = header(stream)
    except Exception as error:  # noqa: BLE001 - whatever numpy raises on a bad header
        raise ValueError(f"array {key!r} is not a .npy payload: {error}") from None
    if dtype.kind not in _NUMERIC or dtype.hasobject:
        raise ValueError(f"array {key!r} has dtype {dtype}; allowed: bool, integer, float")
    size = math.prod(shape) * dtype.itemsize
    if size != len(data) - stream.tell():
        raise ValueError(
            f"array {key!r} declares shape {shape} of {dtype} ({size} bytes) but carries "
            f"{len(data) - stream.tell()} bytes"
        )
    stream.seek(0)
    return np.load(stream, allow_pickle=False)


def read_identity(reply: Message | None) -> tuple[int | None, int | None]:
    """``(partition-id, num-examples)`` of a query reply; None for each that is missing or
    not a whole number in [0, 2**53] (NaN, negative, 1.5), and both for an error or no reply."""
    if reply is None or reply.has_error():
        return None, None
    metrics = metrics_of(reply)
    return _whole(metrics.get("partition-id")), _whole(metrics.get("num-examples"))


def _whole(value: int | float | None) -> int | None:
    if isinstance(value, int):  # compared as an int: float() of 10**400 overflows
        return value if 0 <= value <= MAX_NUM_EXAMPLES else None
    if value is None or not value.is_integer() or not 0 <= value <= MAX_NUM_EXAMPLES:
        return None
    return int(value)


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
