"""Datasets as in-memory uint8 tensors: the embedded MNIST default, torchvision and Hugging Face
sources, a user's own folders; normalised one batch at a time."""

from fl_async.data.imageset import (
    FederatedData,
    ImageSet,
    Indices,
    as_index,
    channel_stats,
    iter_batches,
    normalize,
)
from fl_async.data.loader import (
    HUB_IDS,
    NAMES,
    SOURCES,
    default_root,
    load_dataset,
    load_labels,
    load_owners,
)
from fl_async.data.split import stratified_split

__all__ = [
    "HUB_IDS",
    "NAMES",
    "SOURCES",
    "FederatedData",
    "ImageSet",
    "Indices",
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
