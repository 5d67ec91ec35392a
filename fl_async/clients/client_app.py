"""The ClientApp's message handlers: train, evaluate and identify on one node's data.

``fl_async.app.client_app`` registers them on the ``ClientApp`` that ``flwr run`` loads. The
node's data comes from its node config (``fl_async.clients.node_data``); ``device`` and
``threads`` may be set per node too. Training settings come from the task's config, else the
run config, else their defaults (``fl_async.config``); in a study, where one simulation serves
many runs, the run config is the one the message carries (``run_config_of``). ``slowdown = k``
in the node config makes the node ``k`` times slower for real: after a train or evaluate task
it sleeps ``k - 1`` times the task's own compute time before replying. The message protocol is
``fl_async.protocol``. Nothing here imports server code, so a device installs fl-async
without its simulation extra (docs/running.md, "Installing").
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common.logger import log
from torch import nn

from fl_async.clients import training
from fl_async.clients.device import in_ray_simulation, limit_torch_threads, select_device
from fl_async.clients.node_data import NodeData, load_node_data, new_model
from fl_async.config import NODE_KEYS, TrainSpec, read
from fl_async.data import FederatedData
from fl_async.data_spec import DataSpec
from fl_async.models import get_weights, set_weights
from fl_async.protocol import (
    ARRAYS_KEY,
    CONFIG_KEY,
    IDENTIFY,
    METRICS_KEY,
    RUN_SETTINGS_KEY,
    metric_record,
    to_record,
)
from fl_async.validation import check_number

SLOWDOWN_KEY = "slowdown"
"""Node-config key: this node's factor of slowness (>= 1; 1, the default, is its own speed)."""


def train(msg: Message, context: Context) -> Message:
    """Train the received model on this node's data; reply with its weights and metrics."""
    started = time.perf_counter()
    slowdown = slowdown_of(context.node_config)
    run_config = run_config_of(msg, context)
    _limit_threads(context, run_config)
    node = load_node_data(context.node_config, run_config)
    task = _config_of(msg)
    spec = TrainSpec.from_configs(task, run_config)
    keys, model = _received_model(msg, node.data, run_config)
    metrics = training.train_task(
        model,
        node.data.train,
        node.train_index,
        spec,
        device=_device(context, run_config),
        seed=_task_seed(task, run_config, node.partition_id),
    )
    content = RecordDict(
        {
            ARRAYS_KEY: to_record(keys, get_weights(model)),
            METRICS_KEY: metric_record({**metrics, **_identity(node)}),
        }
    )
    _slow_down(slowdown, time.perf_counter() - started)
    return Message(content, reply_to=msg)


def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received model on this node's share of the test split."""
    started = time.perf_counter()
    slowdown = slowdown_of(context.node_config)
    run_config = run_config_of(msg, context)
    _limit_threads(context, run_config)
    node = load_node_data(context.node_config, run_config)
    _, model = _received_model(msg, node.data, run_config)
    device = _device(context, run_config)
    metrics = training.evaluate(model, node.data.test, node.test_index, device=device)
    _slow_down(slowdown, time.perf_counter() - started)
    # No partition-id here: the strategy averages evaluate replies key by key.
    return Message(RecordDict({METRICS_KEY: metric_record(metrics)}), reply_to=msg)


def query(msg: Message, context: Context) -> Message:
    """Answer the strategy's identify query with ``partition-id`` and ``num-examples``."""
    config = _config_of(msg)
    if any(config.get(key) != value for key, value in IDENTIFY.items()):
        raise ValueError(f"unknown query {dict(config)}; this ClientApp answers {IDENTIFY}")
    node = load_node_data(context.node_config, run_config_of(msg, context))
    metrics = {"num-examples": len(node.train_index), **_identity(node)}
    return Message(RecordDict({METRICS_KEY: metric_record(metrics)}), reply_to=msg)


def run_config_of(msg: Message, context: Context) -> Mapping[str, Any]:
    """The run config ``msg``'s task runs with: a study's ``run-settings`` (its run's node keys)
    over the context's run config, since one simulation's nodes serve every run of a study."""
    settings = msg.content.config_records.get(RUN_SETTINGS_KEY)
    if settings is None:
        return context.run_config
    unknown = sorted(set(settings) - set(NODE_KEYS))
    if unknown:
        raise ValueError(
            f"{RUN_SETTINGS_KEY!r} may hold only the node keys ({', '.join(NODE_KEYS)}); "
            f"got {', '.join(unknown)}"
        )
    return {**context.run_config, **dict(settings)}


def slowdown_of(node_config: Mapping[str, Any]) -> float:
    """The node config's ``slowdown`` (1.0 when absent); ``InvalidArgument`` unless a number
    >= 1."""
    value = node_config.get(SLOWDOWN_KEY, 1.0)
    return check_number(f"node config {SLOWDOWN_KEY!r}", value, minimum=1.0)


def _slow_down(slowdown: float, compute: float) -> None:
    """Sleep ``(slowdown - 1) * compute`` seconds: the node replies as a device ``slowdown``
    times slower would, its task's own compute time (data, model, training) scaled alike."""
    if slowdown > 1.0:
        time.sleep((slowdown - 1.0) * compute)


def _config_of(msg: Message) -> ConfigRecord:
    return msg.content.config_records.get(CONFIG_KEY, ConfigRecord())


def _received_model(
    msg: Message, data: FederatedData, run_config: Mapping[str, Any]
) -> tuple[list[str], nn.Module]:
    """The message's ArrayRecord (``arrays`` or the only one) loaded into a new model."""
    records = msg.content.array_records
    if ARRAYS_KEY in records:
        record: ArrayRecord = records[ARRAYS_KEY]
    elif len(records) == 1:
        record = next(iter(records.values()))
    else:
        raise ValueError(f"expected an ArrayRecord {ARRAYS_KEY!r}, got {sorted(records)}")
    model = _model_for(DataSpec.from_config(run_config), data)
    set_weights(model, record.to_numpy_ndarrays())
    return list(record.keys()), model


_models = threading.local()
MODELS_KEPT = 4
"""Models a thread keeps (the most recently used): a study's runs may use several models."""


def _model_for(spec: DataSpec, data: FederatedData) -> nn.Module:
    """This thread's model of ``spec`` for ``data``'s shape, built once and reused by every
    task: a Ray actor serves many virtual nodes in turn (of several runs, in a study), and a
    model built per task cost more than its weights' copy. Every task loads all of the model's
    state (``set_weights``) and builds its own optimizer, so a reused model trains exactly as a
    new one."""
    key = (spec.model, data.input_shape, data.num_classes)
    cache: OrderedDict = _models.__dict__.setdefault("by_key", OrderedDict())
    if key in cache:
        cache.move_to_end(key)
    else:
        cache[key] = new_model(spec, data)
        while len(cache) > MODELS_KEPT:
            cache.popitem(last=False)
    return cache[key]


def _task_seed(
    task: Mapping[str, Any], run_config: Mapping[str, Any], partition: int | None
) -> int:
    if "task-seed" in task:
        return int(task["task-seed"])
    # A server other than fl-async's (e.g. FedAvg) sends no task-seed: derive one that still
    # depends only on the run's seed, the node and the round.
    words = [int(read("seed", run_config)), partition or 0, int(task.get("server-round", 0))]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def _identity(node: NodeData) -> dict[str, int]:
    return {} if node.partition_id is None else {"partition-id": node.partition_id}


def _device(context: Context, run_config: Mapping[str, Any]) -> torch.device:
    # The node config first: a mixed fleet runs one app, with "cuda" on some devices only.
    return select_device(str(read("device", context.node_config, run_config)))


def _limit_threads(context: Context, run_config: Mapping[str, Any]) -> None:
    """Apply ``threads`` (node config, else run config); 0 means one thread inside a Ray actor
    and torch's default elsewhere (``limit_torch_threads``)."""
    threads = limit_torch_threads(int(read("threads", context.node_config, run_config)))
    if in_ray_simulation():
        ray = sys.modules["ray"]
        node = f"{ray.get_runtime_context().get_node_id()} ({ray.util.get_node_ip_address()})"
        _announce_ray_worker(node, threads)


@functools.cache
def _announce_ray_worker(node: str, threads: int) -> None:
    """Log once per Ray worker process which Ray node runs its ClientApps, and with how many
    torch threads: on a cluster, which machines train, and that they all train alike (another
    thread count changes float sums). Ray shows the line in the simulation's output and keeps
    it in that node's worker log."""
    log(
        INFO,
        "fl-async: ClientApp in Ray worker %d on Ray node %s, %d torch thread(s)",
        os.getpid(),
        node,
        threads,
    )
