"""Datasets as in-memory tensors: uint8 images (the embedded MNIST default, torchvision and Hugging
Face sources, a user's own folders; normalised one batch at a time) and float32 feature vectors.

Each name is imported from its module on first use (PEP 562): the launcher checks a run's
labels and split with numpy alone, without the second or two that importing torch costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fl_async.lazy import lazy_names

if TYPE_CHECKING:
    from fl_async.data.features import FeatureSet
    from fl_async.data.imageset import (
        Examples,
        FederatedData,
        ImageSet,
        Indices,
        as_index,
        channel_stats,
        iter_batches,
        normalize,
    )
    from fl_async.data.loader import NAMES, SOURCES, load_dataset, load_labels, load_owners
    from fl_async.data.sources import HUB_IDS, default_root
    from fl_async.data.split import stratified_split
    from fl_async.data.synthetic import Synthetic

_MODULE_OF = {
    "FeatureSet": "features",
    **dict.fromkeys(
        (
            "Examples",
            "FederatedData",
            "ImageSet",
            "Indices",
            "as_index",
            "channel_stats",
            "iter_batches",
            "normalize",
        ),
        "imageset",
    ),
    **dict.fromkeys(("NAMES", "SOURCES", "load_dataset", "load_labels", "load_owners"), "loader"),
    "HUB_IDS": "sources",
    "default_root": "sources",
    "stratified_split": "split",
    "Synthetic": "synthetic",
}

__all__ = [
    "HUB_IDS",
    "NAMES",
    "SOURCES",
    "Examples",
    "FederatedData",
    "FeatureSet",
    "ImageSet",
    "Indices",
    "Synthetic",
    "as_index",
    "channel_stats",
    "default_root",
    "iter_batches",
    "load_dataset",
    "load_labels",
    "load_owners",
    "normalize",
    "stratified_split",
]


__getattr__, __dir__ = lazy_names(__name__, _MODULE_OF, globals())
