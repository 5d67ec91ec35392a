"""The ClientApp's message handlers: train, evaluate and identify on one node's data.

``fl_async.app.client_app`` registers them on the ``ClientApp`` that ``flwr run`` loads. A node's
data comes from ``context.node_config``: ``partition-id`` and ``num-partitions`` (set by Flower's
simulation engine, or by ``flower-supernode --node-config``) pick its partition of the run's
dataset; ``data-dir`` on a device names its own dataset instead (anything ``load_dataset``
reads: ``imagefolder:<path>``, ``disk:<path>``, a parquet path). ``device`` and ``threads`` may
be set per node too. Training settings come from the task's config, else the run config, else
``CLIENT_DEFAULTS``. The message protocol is ``fl_async.protocol``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict, UserConfigValue
from torch import nn

from fl_async.clients import training
from fl_async.clients.device import select_device
from fl_async.data import FederatedData, load_dataset
from fl_async.models import build_model, get_weights, set_weights
from fl_async.partitioning import cached_split, scheme_parameters
from fl_async.partitioning.schemes import scheme_name
from fl_async.protocol import (
    ARRAYS_KEY,
    CONFIG_KEY,
    IDENTIFY,
    METRICS_KEY,
    metric_record,
    to_record,
)

CLIENT_DEFAULTS: dict[str, UserConfigValue] = {
    "dataset": "mnist",
    "data-root": "",
    "model": "auto",
    "seed": 0,
    "partition.scheme": "dirichlet",
    "partition.alpha": 0.3,
    "partition.min-partition-size": 1,
    "partition.self-balancing": False,
    "partition.classes-per-partition": 2,
    "partition.shards-per-partition": 2,
    "local-epochs": 2,
    "local-steps": 0,
    "lr": 0.1,
    "momentum": 0.0,
    "weight-decay": 0.0,
    "batch-size": 32,
    "proximal-mu": 0.0,
    "device": "auto",
    "threads": 0,
}
"""Every run-config key the ClientApp reads, with its default (pyproject.toml holds the same)."""

TRAIN_KEYS: tuple[str, ...] = (
    "local-epochs",
    "local-steps",
    "lr",
    "momentum",
    "weight-decay",
    "batch-size",
    "proximal-mu",
)
"""The training settings a task's config may carry (the server sends them with every task)."""

_PARTITION_PREFIX = "partition."
_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def typed(key: str, value: Any, default: UserConfigValue) -> UserConfigValue:
    """``value`` as the type of ``default`` (an int is accepted for a float); else ValueError."""
    kind = type(default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not kind:
        raise ValueError(f"config key {key!r} must be {_KIND_NAMES[kind]}, got {value!r}")
    return value


def setting(key: str, *sources: Mapping[str, Any]) -> UserConfigValue:
    """``key`` from the first of ``sources`` that has it, else its default, typed."""
    for source in sources:
        if key in source:
            return typed(key, source[key], CLIENT_DEFAULTS[key])
    return CLIENT_DEFAULTS[key]


@dataclass(frozen=True)
class DataSpec:
    """Which dataset, model and split a run uses (the server and every node agree on it)."""

    dataset: str
    root: str
    model: str
    seed: int
    scheme: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def from_config(cls, run_config: Mapping[str, Any]) -> DataSpec:
        """Read the data keys of ``run_config``; an unknown scheme lists the allowed ones."""
        scheme = scheme_name(str(setting("partition.scheme", run_config)))
        params = []
        for name in scheme_parameters(scheme):
            key = _PARTITION_PREFIX + name.replace("_", "-")
            if key in CLIENT_DEFAULTS:
                params.append((name, setting(key, run_config)))
        seed = int(setting("seed", run_config))
        if seed < 0:
            raise ValueError(f"config key 'seed' must be >= 0, got {seed}")
        return cls(
            dataset=str(setting("dataset", run_config)),
            root=str(setting("data-root", run_config)),
            model=str(setting("model", run_config)),
            seed=seed,
            scheme=scheme,
            params=tuple(params),
        )

    def partitions(self, data: FederatedData, num_partitions: int) -> list[np.ndarray]:
        """Indices into ``data.train`` of every partition (cached per process)."""
        labels = data.train.labels.numpy()
        return cached_split(labels, self.scheme, num_partitions, self.seed, **dict(self.params))


@dataclass(frozen=True)
class TrainSpec:
    """How one task trains: ``epochs`` passes or ``steps`` batches, and the SGD settings."""

    epochs: int | None
    steps: int | None
    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    proximal_mu: float

    @classmethod
    def from_configs(cls, task: Mapping[str, Any], run_config: Mapping[str, Any]) -> TrainSpec:
        """Each setting from the task's config, else the run config, else its default."""
        steps = int(setting("local-steps", task, run_config))
        if "local-epochs" in task and "local-steps" not in task:
            steps = 0  # the task asked for epochs: a run config's local-steps must not override it
        epochs = int(setting("local-epochs", task, run_config))
        if steps < 0 or (steps == 0 and epochs < 1):
            raise ValueError(
                f"set local-steps >= 1, or local-steps = 0 and local-epochs >= 1; "
                f"got local-steps={steps}, local-epochs={epochs}"
            )
        return cls(
            epochs=None if steps else epochs,
            steps=steps or None,
            lr=float(setting("lr", task, run_config)),
            momentum=float(setting("momentum", task, run_config)),
            weight_decay=float(setting("weight-decay", task, run_config)),
            batch_size=int(setting("batch-size", task, run_config)),
            proximal_mu=float(setting("proximal-mu", task, run_config)),
        )


@dataclass(frozen=True)
class NodeData:
    """One node's data: the dataset, the indices it trains on and those it evaluates on."""

    data: FederatedData
    train_index: np.ndarray
    test_index: np.ndarray
    partition_id: int | None


@functools.lru_cache(maxsize=2)
def cached_dataset(name: str, root: str) -> FederatedData:
    """``load_dataset(name)`` once per process: many virtual nodes share one Ray actor."""
    return load_dataset(name, root=root or None)


def load_node_data(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> NodeData:
    """This node's data: its own ``data-dir``, or partition ``partition-id`` of the run's dataset.

    A partitioned node evaluates on its share of the test split (an even slice by
    ``partition-id``); a node with ``data-dir`` on that dataset's whole test split.
    """
    spec = DataSpec.from_config(run_config)
    partition_id = node_config.get("partition-id")
    if "data-dir" in node_config:
        data = cached_dataset(str(node_config["data-dir"]), spec.root)
        return NodeData(
            data,
            np.arange(len(data.train)),
            np.arange(len(data.test)),
            None if partition_id is None else int(partition_id),
        )
    if partition_id is None or "num-partitions" not in node_config:
        raise ValueError(
            "the node config needs partition-id and num-partitions (Flower's simulation sets "
            "them; on a device pass --node-config 'partition-id=0 num-partitions=2') or "
            f"data-dir; got {dict(node_config)}"
        )
    partition_id, num_partitions = int(partition_id), int(node_config["num-partitions"])
    data = cached_dataset(spec.dataset, spec.root)
    parts = spec.partitions(data, num_partitions)
    if not 0 <= partition_id < len(parts):
        raise ValueError(f"partition-id must lie in [0, {len(parts)}), got {partition_id}")
    test_share = np.array_split(np.arange(len(data.test)), num_partitions)[partition_id]
    # A copy: the cached split is read-only, and torch warns on tensors over read-only memory.
    return NodeData(data, parts[partition_id].copy(), test_share, partition_id)


def new_model(spec: DataSpec, data: FederatedData, seed: int = 0) -> nn.Module:
    """The run's model for ``data``'s shape, initialised from ``seed`` alone."""
    channels, size, _ = data.image_shape
    return build_model(
        spec.model, num_classes=data.num_classes, in_channels=channels, image_size=size, seed=seed
    )


def train(msg: Message, context: Context) -> Message:
    """Train the received model on this node's data; reply with its weights and metrics."""
    run_config = context.run_config
    _limit_threads(context)
    node = load_node_data(context.node_config, run_config)
    task = _config_of(msg)
    spec = TrainSpec.from_configs(task, run_config)
    keys, model = _received_model(msg, node.data, run_config)
    metrics = training.train(
        model,
        node.data.train,
        node.train_index,
        epochs=spec.epochs,
        steps=spec.steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        proximal_mu=spec.proximal_mu,
        device=_device(context),
        seed=_task_seed(task, run_config, node.partition_id),
    )
    content = RecordDict(
        {
            ARRAYS_KEY: to_record(keys, get_weights(model)),
            METRICS_KEY: metric_record({**metrics, **_identity(node)}),
        }
    )
    return Message(content, reply_to=msg)


def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received model on this node's share of the test split."""
    run_config = context.run_config
    _limit_threads(context)
    node = load_node_data(context.node_config, run_config)
    _, model = _received_model(msg, node.data, run_config)
    metrics = training.evaluate(model, node.data.test, node.test_index, device=_device(context))
    # No partition-id here: the strategy averages evaluate replies key by key.
    return Message(RecordDict({METRICS_KEY: metric_record(metrics)}), reply_to=msg)


def query(msg: Message, context: Context) -> Message:
    """Answer the strategy's identify query with ``partition-id`` and ``num-examples``."""
    config = _config_of(msg)
    if any(config.get(key) != value for key, value in IDENTIFY.items()):
        raise ValueError(f"unknown query {dict(config)}; this ClientApp answers {IDENTIFY}")
    node = load_node_data(context.node_config, context.run_config)
    metrics = {"num-examples": len(node.train_index), **_identity(node)}
    return Message(RecordDict({METRICS_KEY: metric_record(metrics)}), reply_to=msg)


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
    model = new_model(DataSpec.from_config(run_config), data)
    set_weights(model, record.to_numpy_ndarrays())
    return list(record.keys()), model


def _task_seed(
    task: Mapping[str, Any], run_config: Mapping[str, Any], partition: int | None
) -> int:
    if "task-seed" in task:
        return int(task["task-seed"])
    # A server other than fl-async's (e.g. FedAvg) sends no task-seed: derive one that still
    # depends only on the run's seed, the node and the round.
    words = [int(setting("seed", run_config)), partition or 0, int(task.get("server-round", 0))]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def _identity(node: NodeData) -> dict[str, int]:
    return {} if node.partition_id is None else {"partition-id": node.partition_id}


def _device(context: Context) -> torch.device:
    # The node config first: a mixed fleet runs one app, with "cuda" on some devices only.
    return select_device(str(setting("device", context.node_config, context.run_config)))


def _limit_threads(context: Context) -> None:
    """Apply ``threads`` (node config, else run config); 0 means one thread inside a Ray actor
    and torch's default elsewhere.

    In simulation, each Ray actor already has its own core: a second torch thread per actor
    only competes with the other actors (docs/data.md measures it slower on two cores).
    """
    threads = int(setting("threads", context.node_config, context.run_config))
    if threads < 0:
        raise ValueError(f"config key 'threads' must be >= 0, got {threads}")
    if threads == 0:
        ray = sys.modules.get("ray")  # never imported here: only a Ray worker has it loaded
        threads = 1 if ray is not None and ray.is_initialized() else 0
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
