"""In-memory image sets: uint8 images and int64 labels, normalised one batch at a time; the
federated data set that holds a train and a test split of images or feature vectors."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fl_async.data.features import FeatureSet
from fl_async.validation import InvalidArgument, check_int

Indices = Sequence[int] | np.ndarray | torch.Tensor
"""Positions of examples in a split: a list or range of ints, an int array or tensor."""

# Images per chunk when computing channel statistics: bounds the float64 copy to ~25 MB for CIFAR.
_STATS_CHUNK = 1024
NORMALIZED_CACHE_BYTES = 256 * 1024**2
"""Largest float32 copy of an image set kept normalised in memory (MNIST's train split: 12.5 MB;
CIFAR-10's, 614 MB, is normalised batch by batch instead)."""


@dataclass(frozen=True)
class ImageSet:
    """Images (uint8, N×C×H×W) with labels (int64, N) and the per-channel mean/std (in [0, 1] units)
    that ``normalize`` applies to every batch drawn from them."""

    images: torch.Tensor
    labels: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise InvalidArgument(
                f"images must be a uint8 tensor N×C×H×W, got {self.images.dtype} "
                f"of shape {tuple(self.images.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.shape != (len(self.images),):
            raise InvalidArgument(
                f"labels must be an int64 tensor of shape ({len(self.images)},), got "
                f"{self.labels.dtype} of shape {tuple(self.labels.shape)}"
            )
        channels = self.images.shape[1]
        if len(self.mean) != channels or len(self.std) != channels:
            raise InvalidArgument(
                f"mean and std need one value per channel ({channels}), got mean {self.mean} "
                f"and std {self.std}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """The shape of one image: channels, height and width."""
        channels, height, width = self.images.shape[1:]
        return int(channels), int(height), int(width)

    def batch(
        self, index: torch.Tensor, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised images and labels of the examples ``index`` (int64), on ``device``."""
        if _on_cpu(device) and self._normalized is not None:
            # The same float32 values normalize() gives a batch, computed once.
            return self._normalized[index], self.labels[index]
        # Move uint8 first: a quarter of the bytes of float32 cross to an accelerator.
        images = self.images[index].to(device)
        return normalize(images, self.mean, self.std), self.labels[index].to(device)

    @functools.cached_property
    def _normalized(self) -> torch.Tensor | None:
        """Every image normalised once, for batches drawn on the CPU (every local epoch and
        every evaluation reads them again); None when that would take more than
        ``NORMALIZED_CACHE_BYTES``."""
        if self.images.numel() * 4 > NORMALIZED_CACHE_BYTES:
            return None
        return normalize(self.images, self.mean, self.std)


Examples = ImageSet | FeatureSet
"""Labelled examples a model trains on: images (normalised per batch) or feature vectors."""


@dataclass(frozen=True)
class FederatedData:
    """A dataset ready for federated runs: a train split to partition and a test split for the
    server; images are normalised with the train split's statistics, feature vectors not at all."""

    name: str
    train: Examples
    test: Examples
    num_classes: int
    owners: np.ndarray | None = None
    """The owner (a writer, a device) of each train example as an int64 id, or None when the
    dataset has none; the ``natural`` partition scheme keeps each owner's examples together."""

    def __post_init__(self) -> None:
        owners = self.owners
        if owners is None:
            return
        if not isinstance(owners, np.ndarray):
            raise InvalidArgument(f"owners must be a numpy array or None, got {owners!r}")
        if owners.dtype != np.int64 or owners.shape != (len(self.train),):
            raise InvalidArgument(
                f"owners must be int64 of shape ({len(self.train)},), one id per train example; "
                f"got {owners.dtype} of shape {owners.shape}"
            )

    @property
    def mean(self) -> tuple[float, ...]:
        """Per-channel mean of the train images, in [0, 1] units."""
        return self._images().mean

    @property
    def std(self) -> tuple[float, ...]:
        """Per-channel standard deviation of the train images, in [0, 1] units."""
        return self._images().std

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example: ``(C, H, W)`` for images, ``(D,)`` for feature vectors."""
        return self.train.input_shape

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """Channels, height and width of every image."""
        return self._images().input_shape

    def _images(self) -> ImageSet:
        if not isinstance(self.train, ImageSet):
            raise InvalidArgument(
                f"{self.name} holds feature vectors of shape {self.input_shape}, not images: "
                "it has no image shape or channel statistics"
            )
        return self.train


def channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of uint8 images, in [0, 1] units."""
    channels = images.shape[1]
    total = torch.zeros(channels, dtype=torch.float64)
    squares = torch.zeros(channels, dtype=torch.float64)
    for chunk in images.split(_STATS_CHUNK):
        values = chunk.to(torch.float64)
        total += values.sum(dim=(0, 2, 3))
        squares += values.square().sum(dim=(0, 2, 3))
    count = images.numel() // channels
    mean = total / count
    std = (squares / count - mean.square()).clamp_min(0).sqrt()
    # A constant channel would divide by zero; leaving it unscaled keeps it finite.
    std = torch.where(std > 0, std, torch.full_like(std, 255.0))
    return tuple((mean / 255).tolist()), tuple((std / 255).tolist())


def federated_data(
    name: str,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    num_classes: int,
    owners: np.ndarray | None = None,
) -> FederatedData:
    """Bundle (images, labels) pairs into ``FederatedData``, normalised with train statistics;
    ``owners``: the owner id of each train example, if the dataset has them."""
    mean, std = channel_stats(train[0])
    return FederatedData(
        name=name,
        train=ImageSet(images=train[0], labels=train[1], mean=mean, std=std),
        test=ImageSet(images=test[0], labels=test[1], mean=mean, std=std),
        num_classes=num_classes,
        owners=owners,
    )


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Scale uint8 images (…×C×H×W) to float32 with zero mean and unit variance per channel."""
    if images.dtype != torch.uint8:
        raise InvalidArgument(f"normalize expects uint8 images, got {images.dtype}")
    shape = (len(mean), 1, 1)
    mean_t = torch.tensor(mean, dtype=torch.float32, device=images.device).view(shape)
    std_t = torch.tensor(std, dtype=torch.float32, device=images.device).view(shape)
    return images.to(torch.float32).div_(255).sub_(mean_t).div_(std_t)


def _on_cpu(device: torch.device | str | None) -> bool:
    return device is None or torch.device(device).type == "cpu"


def as_index(indices: Indices | None, size: int) -> torch.Tensor:
    """``indices`` (all of ``range(size)`` when None) as a range-checked 1-D int64 tensor."""
    if indices is None:
        return torch.arange(size)
    array = np.asarray(indices).reshape(-1)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise InvalidArgument(f"indices must be integers, got dtype {array.dtype}")
    # Cached partitions are read-only numpy arrays, which torch cannot share: copy those.
    index = (
        torch.tensor(array, dtype=torch.int64)
        if not array.flags.writeable
        else (torch.as_tensor(array, dtype=torch.int64))
    )
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= size):
        raise IndexError(
            f"indices must lie in [0, {size}), got [{int(index.min())}, {int(index.max())}]"
        )
    return index


def iter_batches(
    data: Examples,
    indices: Indices | None = None,
    *,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One pass over ``indices`` in batches of inputs (images normalised) and labels on ``device``.

    The order is shuffled with ``generator`` when given, else kept; the last batch may be short.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    index = as_index(indices, len(data))
    if generator is not None:
        index = index[torch.randperm(len(index), generator=generator)]
    for batch in index.split(batch_size):
        yield data.batch(batch, device)
