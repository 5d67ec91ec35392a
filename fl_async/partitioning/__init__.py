"""Non-IID splits of a label array, how skewed they are, pictures of them, and adapters.

Schemes (``.schemes``): ``iid``, ``dirichlet``, ``label_skew``, ``shards``, ``quantity_skew``,
``natural`` (by owner: a writer, a device) and ``partition`` to pick one by name. Metrics
(``.metrics``): ``count_matrix`` and ``heterogeneity``. Plots (``.plots``). Adapters
(``.adapters``): ``labels_of``, ``owners_of`` and ``load_partition`` for torchvision and
Hugging Face datasets, and flwr-datasets partitioners (``.partitioners``, loaded with
flwr-datasets on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .adapters import cached_split, labels_of, load_partition, owners_of, subset
from .metrics import Heterogeneity, count_matrix, heterogeneity
from .plots import plot_heatmap, plot_partitions, plot_stacked_bars
from .schemes import (
    SCHEMES,
    dirichlet,
    iid,
    label_skew,
    natural,
    natural_assignment,
    partition,
    quantity_skew,
    scheme_parameters,
    shards,
)

if TYPE_CHECKING:
    from .partitioners import (
        DirichletPartitioner,
        IidPartitioner,
        LabelSkewPartitioner,
        NaturalPartitioner,
        QuantitySkewPartitioner,
        SchemePartitioner,
        ShardsPartitioner,
    )

_PARTITIONERS = (
    "SchemePartitioner",
    "IidPartitioner",
    "DirichletPartitioner",
    "LabelSkewPartitioner",
    "ShardsPartitioner",
    "QuantitySkewPartitioner",
    "NaturalPartitioner",
)

__all__ = [
    "SCHEMES",
    "Heterogeneity",
    "cached_split",
    "count_matrix",
    "dirichlet",
    "heterogeneity",
    "iid",
    "label_skew",
    "labels_of",
    "load_partition",
    "natural",
    "natural_assignment",
    "owners_of",
    "partition",
    "plot_heatmap",
    "plot_partitions",
    "plot_stacked_bars",
    "quantity_skew",
    "scheme_parameters",
    "shards",
    "subset",
    "SchemePartitioner",
    "IidPartitioner",
    "DirichletPartitioner",
    "LabelSkewPartitioner",
    "ShardsPartitioner",
    "QuantitySkewPartitioner",
    "NaturalPartitioner",
]


def __getattr__(name: str) -> Any:
    # The partitioners subclass flwr-datasets' Partitioner, so importing them imports
    # flwr-datasets; doing it on first access keeps `import fl_async.partitioning` numpy-only.
    if name in _PARTITIONERS:
        return getattr(importlib.import_module(f"{__name__}.partitioners"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
