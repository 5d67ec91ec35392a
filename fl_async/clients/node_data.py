"""One node's data and model: its partition of the run's dataset, or a device's own ``data-dir``.

A node's data comes from ``context.node_config``: ``partition-id`` and ``num-partitions`` (set
by Flower's simulation engine, or by ``flower-supernode --node-config``) pick its partition of
the run's dataset; ``data-dir`` on a device names its own dataset instead (anything
``load_dataset`` reads: ``imagefolder:<path>``, ``disk:<path>``, a parquet path). The ServerApp
loads and splits the dataset with the same functions, for central evaluation and its records.
A ``synthetic`` node generates its own devices and nothing else (``natural_assignment`` says
which); the ServerApp generates every device's labels and test samples, never train features.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_async.config import SYNTHETIC
from fl_async.data.loader import load_dataset
from fl_async.data.synthetic import NUM_CLASSES, Synthetic
from fl_async.data_spec import DataSpec
from fl_async.partitioning import natural_assignment

if TYPE_CHECKING:
    from torch import nn

    from fl_async.data.imageset import Examples, FederatedData


@dataclass(frozen=True)
class NodeData:
    """One node's data: the dataset, the indices it trains on and those it evaluates on."""

    data: FederatedData
    train_index: np.ndarray
    test_index: np.ndarray
    partition_id: int | None


@dataclass(frozen=True)
class RunData:
    """What the ServerApp reads of the run's dataset: the train labels and owners it splits as
    the nodes do, and the test split it evaluates on."""

    name: str
    labels: np.ndarray
    owners: np.ndarray | None
    test: Examples
    num_classes: int
    input_shape: tuple[int, ...]


@functools.lru_cache(maxsize=2)
def cached_dataset(
    name: str, root: str, owner_column: str = "", synthetic: Synthetic | None = None
) -> FederatedData:
    """``load_dataset(name)`` once per process: many virtual nodes share one Ray actor.
    ``owner_column`` ("": the default) names the Hugging Face column of the owners;
    ``synthetic`` sets the parameters of ``synthetic``."""
    return load_dataset(
        name, root=root or None, owner_column=owner_column or None, synthetic=synthetic
    )


def synthetic_of(spec: DataSpec, num_nodes: int) -> Synthetic | None:
    """The run's Synthetic data set (None for other datasets): the ``synthetic.*`` keys, the
    run's ``seed``, and as many devices as nodes unless ``synthetic.devices`` says otherwise."""
    if spec.dataset != SYNTHETIC:
        return None
    params = dict(spec.synthetic)
    params["devices"] = params.get("devices") or num_nodes
    return Synthetic(**params, seed=spec.seed)


def load_run_data(spec: DataSpec, num_nodes: int) -> RunData:
    """The ServerApp's view of the run's dataset over ``num_nodes`` nodes (once per process)."""
    synthetic = synthetic_of(spec, num_nodes)
    if synthetic is not None:
        labels, test = _synthetic_server_data(synthetic)
        return RunData(SYNTHETIC, labels, synthetic.owners(), test, NUM_CLASSES, test.input_shape)
    data = cached_dataset(spec.dataset, spec.root, spec.owner_column)
    return RunData(
        data.name,
        data.train.labels.numpy(),
        data.owners,
        data.test,
        data.num_classes,
        data.input_shape,
    )


def pooled_train(spec: DataSpec, num_nodes: int) -> Examples:
    """The run's whole training set over ``num_nodes`` nodes: every node's examples pooled
    (Synthetic: every device's), what the ServerApp's root sample is drawn from."""
    synthetic = synthetic_of(spec, num_nodes)
    if synthetic is not None:
        return synthetic.load().train
    return cached_dataset(spec.dataset, spec.root, spec.owner_column).train


@functools.lru_cache(maxsize=1)
def _synthetic_server_data(synthetic: Synthetic) -> tuple[np.ndarray, Examples]:
    return synthetic.labels_and_test()


def load_node_data(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> NodeData:
    """This node's data: its own ``data-dir``, or partition ``partition-id`` of the run's dataset.

    A partitioned node evaluates on its share of the test split (an even slice by
    ``partition-id``; a Synthetic node on its own devices' test samples); a node with
    ``data-dir`` on that dataset's whole test split.
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
    synthetic = synthetic_of(spec, num_partitions)
    if synthetic is not None:
        return _synthetic_node(synthetic, partition_id, num_partitions)
    data = cached_dataset(spec.dataset, spec.root, spec.owner_column)
    parts = spec.split(data.train.labels.numpy(), num_partitions, owners=data.owners)
    if not 0 <= partition_id < len(parts):
        raise ValueError(f"partition-id must lie in [0, {len(parts)}), got {partition_id}")
    test_share = np.array_split(np.arange(len(data.test)), num_partitions)[partition_id]
    # A copy: the cached split is read-only, and torch warns on tensors over read-only memory.
    return NodeData(data, parts[partition_id].copy(), test_share, partition_id)


def _synthetic_node(synthetic: Synthetic, partition_id: int, num_partitions: int) -> NodeData:
    """A Synthetic node: the train and test samples of the devices the natural scheme gives it,
    generated here (no other device is drawn)."""
    devices = _devices_of(synthetic.devices, num_partitions, synthetic.seed)
    if not 0 <= partition_id < len(devices):
        raise ValueError(f"partition-id must lie in [0, {len(devices)}), got {partition_id}")
    data = _generated(synthetic, tuple(devices[partition_id].tolist()))
    return NodeData(data, np.arange(len(data.train)), np.arange(len(data.test)), partition_id)


@functools.lru_cache(maxsize=2)
def _devices_of(devices: int, num_partitions: int, seed: int) -> dict[int, np.ndarray]:
    # The server splits the pooled train samples with ``natural`` over their devices: the same
    # deal of device ids, computed from the ids alone.
    return natural_assignment(np.arange(devices), num_partitions, seed)


@functools.lru_cache(maxsize=4)
def _generated(synthetic: Synthetic, devices: tuple[int, ...]) -> FederatedData:
    # A Ray actor serves many virtual nodes in turn: keep the last few, not every one it met.
    return synthetic.load(devices)


def new_model(spec: DataSpec, data: FederatedData | RunData, seed: int = 0) -> nn.Module:
    """The run's model for ``data``'s input shape, initialised from ``seed`` alone."""
    # Imported here, with torch: the launcher's checks use this module's synthetic_of only.
    from fl_async.models import build_model

    shape = data.input_shape
    if len(shape) == 1:
        return build_model(
            spec.model, num_classes=data.num_classes, num_features=shape[0], seed=seed
        )
    channels, size, _ = shape
    return build_model(
        spec.model, num_classes=data.num_classes, in_channels=channels, image_size=size, seed=seed
    )
