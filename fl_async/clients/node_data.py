"""One node's data and model: its partition of the run's dataset, or a device's own ``data-dir``.

A node's data comes from ``context.node_config``: ``partition-id`` and ``num-partitions`` (set
by Flower's simulation engine, or by ``flower-supernode --node-config``) pick its partition of
the run's dataset; ``data-dir`` on a device names its own dataset instead (anything
``load_dataset`` reads: ``imagefolder:<path>``, ``disk:<path>``, a parquet path). The ServerApp
loads and splits the dataset with the same functions, for central evaluation and its records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from fl_async.config import DataSpec
from fl_async.data import FederatedData, load_dataset
from fl_async.models import build_model


@dataclass(frozen=True)
class NodeData:
    """One node's data: the dataset, the indices it trains on and those it evaluates on."""

    data: FederatedData
    train_index: np.ndarray
    test_index: np.ndarray
    partition_id: int | None


@functools.lru_cache(maxsize=2)
def cached_dataset(name: str, root: str, owner_column: str = "") -> FederatedData:
    """``load_dataset(name)`` once per process: many virtual nodes share one Ray actor.
    ``owner_column`` ("": the default) names the Hugging Face column of the owners."""
    return load_dataset(name, root=root or None, owner_column=owner_column or None)


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
    data = cached_dataset(spec.dataset, spec.root, spec.owner_column)
    parts = spec.split(data.train.labels.numpy(), num_partitions, owners=data.owners)
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
