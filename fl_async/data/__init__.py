"""Datasets as in-memory tensors: uint8 images (the embedded MNIST default, torchvision and Hugging
Face sources, a user's own folders; normalised one batch at a time) and float32 feature vectors."""

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
