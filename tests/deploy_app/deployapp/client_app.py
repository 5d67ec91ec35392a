"""The ClientApp: answers fl_async's ``query`` (identify) and ``train`` messages.

Node config keys: ``partition-id`` (int) and ``num-partitions`` (int), as set with
``flower-supernode --node-config "partition-id=0 num-partitions=3"``.
"""

from __future__ import annotations

import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from deployapp.task import target

app = ClientApp()


def _partition(context: Context) -> int:
    return int(context.node_config["partition-id"])


@app.query()
def query(msg: Message, context: Context) -> Message:
    """fl_async's identification: report the partition id (a stable identity)."""
    partition = _partition(context)
    metrics = MetricRecord({"partition-id": partition, "num-examples": 10 + partition})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """A few SGD steps on this node's quadratic, seeded by the task's ``task-seed``, after the
    task's ``pause`` (seconds: a task as long as a real device's)."""
    time.sleep(float(msg.content.config_records["config"].get("pause", 0.0)))
    partition = _partition(context)
    record = msg.content.array_records["arrays"]
    config = msg.content.config_records["config"]
    key = next(iter(record.keys()))
    w = record.to_numpy_ndarrays()[0]
    rng = np.random.default_rng(int(config.get("task-seed", 0)))
    for _ in range(int(config.get("local-steps", 3))):
        noise = rng.normal(scale=0.01, size=w.shape).astype(np.float32)
        w = w - np.float32(0.3) * (w - target(partition) + noise)
    arrays = ArrayRecord({key: Array.from_numpy_ndarray(w.astype(np.float32))})
    metrics = MetricRecord({"num-examples": 10 + partition, "partition-id": partition})
    return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)
