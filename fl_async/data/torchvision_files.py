"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from torchvision's on-disk layouts under a root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fl_async.data.idx import read_idx
from fl_async.data.sources import fetch_command

if TYPE_CHECKING:
    import torch
    from torchvision.datasets import CIFAR10, MNIST

    from fl_async.data.imageset import FederatedData

_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
IDX_CLASSES = 10
"""Classes of the IDX datasets (MNIST's digits, Fashion-MNIST's garments)."""


@dataclass(frozen=True)
class TorchvisionSet:
    """Where torchvision keeps one dataset under ``root`` and which of its classes reads it."""

    class_name: str
    folder: str
    files: tuple[str, ...]

    def location(self, root: Path) -> Path:
        """The folder torchvision reads under ``root``."""
        return root / self.folder

    def missing(self, root: Path) -> list[str]:
        """Files absent under ``root`` (an IDX file also counts as present in its .gz form)."""
        where = self.location(root)
        return [
            name
            for name in self.files
            if not (where / name).is_file() and not (where / f"{name}.gz").is_file()
        ]


TORCHVISION_SETS: dict[str, TorchvisionSet] = {
    "mnist": TorchvisionSet("MNIST", "MNIST/raw", _IDX_FILES),
    "fashion-mnist": TorchvisionSet("FashionMNIST", "FashionMNIST/raw", _IDX_FILES),
    "cifar10": TorchvisionSet(
        "CIFAR10",
        "cifar-10-batches-py",
        (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"),
    ),
    "cifar100": TorchvisionSet("CIFAR100", "cifar-100-python", ("train", "test", "meta")),
}


def load_torchvision(name: str, *, root: Path, download: bool) -> FederatedData:
    """Read ``name`` from ``root`` in torchvision's layout (downloading only when asked): the
    IDX files with numpy (``fl_async.data.idx``), CIFAR with its torchvision class."""
    from fl_async.data.imageset import federated_data

    if TORCHVISION_SETS[name].files == _IDX_FILES:
        if download:
            _open(name, root=root, train=True, download=True)  # fetches all four files
        train, test = (_idx_tensors(name, root, prefix) for prefix in ("train", "t10k"))
        return federated_data(name, train=train, test=test, num_classes=IDX_CLASSES)
    train = _open(name, root=root, train=True, download=download)
    test = _open(name, root=root, train=False, download=False)
    return federated_data(
        name, train=_tensors(train), test=_tensors(test), num_classes=len(train.classes)
    )


def torchvision_labels(name: str, *, root: Path, download: bool) -> np.ndarray:
    """Training labels of ``name`` read from ``root`` in torchvision's layout."""
    if TORCHVISION_SETS[name].files == _IDX_FILES:
        if download:
            _open(name, root=root, train=True, download=True)
        (labels,) = _read_idx_files(name, root, ("train-labels-idx1-ubyte", 1))
        return labels.astype(np.int64)
    dataset = _open(name, root=root, train=True, download=download)
    return np.asarray(dataset.targets, dtype=np.int64)


def _read_idx_files(name: str, root: Path, *files: tuple[str, int]) -> list[np.ndarray]:
    """The arrays of ``files`` (file name, rank) of IDX dataset ``name`` under ``root``; a
    damaged file names the command that replaces it."""
    _require_files(name, root)
    where = TORCHVISION_SETS[name].location(root)
    try:
        return [read_idx(where / file, ndim=rank) for file, rank in files]
    except (ValueError, OSError) as error:
        raise RuntimeError(
            f"could not read {name} from {where}: {error}. Fetch a fresh copy (it replaces "
            f"the folder) with: {fetch_command(name, root)}"
        ) from error


def _idx_tensors(name: str, root: Path, prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``prefix`` (``train`` or ``t10k``) of an IDX dataset as torchvision's class gives
    it: N×1×28×28 uint8 images and int64 labels."""
    import torch  # here: the launcher imports this module for its table, and runs without torch

    pixels, labels = _read_idx_files(
        name, root, (f"{prefix}-images-idx3-ubyte", 3), (f"{prefix}-labels-idx1-ubyte", 1)
    )
    if len(pixels) != len(labels):
        raise RuntimeError(
            f"could not read {name} from {TORCHVISION_SETS[name].location(root)}: "
            f"{len(pixels)} {prefix} images but {len(labels)} labels. Fetch a fresh copy with: "
            f"{fetch_command(name, root)}"
        )
    return torch.from_numpy(pixels[:, None]), torch.from_numpy(labels.astype(np.int64))


def _open(name: str, *, root: Path, train: bool, download: bool) -> MNIST | CIFAR10:
    # imported here: with torch._dynamo (through torchvision.ops) it costs about 3 CPU-seconds
    import torchvision.datasets

    spec = TORCHVISION_SETS[name]
    if not download:
        _require_files(name, root)
    dataset_class = getattr(torchvision.datasets, spec.class_name)
    try:
        return dataset_class(root=str(root), train=train, download=download)
    except RuntimeError as error:
        # torchvision says "not found or corrupted" without a path; CIFAR's md5 check lands here.
        raise RuntimeError(
            f"torchvision could not read {spec.class_name} from {spec.location(root)}: {error}. "
            f"Fetch a fresh copy (it replaces the folder) with: {fetch_command(name, root)}"
        ) from error


def _require_files(name: str, root: Path) -> None:
    spec = TORCHVISION_SETS[name]
    missing = spec.missing(root)
    if missing:
        raise FileNotFoundError(
            f"{name} not found: looked in {spec.location(root)} for {', '.join(missing)}; "
            f"fetch it with: {fetch_command(name, root)}"
        )


def _tensors(dataset: CIFAR10) -> tuple[torch.Tensor, torch.Tensor]:
    """A CIFAR split's N×C×H×W uint8 images (stored N×H×W×C) and int64 labels."""
    # torch here (torchvision has loaded it by now): the launcher imports this module for its
    # table of datasets only, and runs without torch.
    import torch

    labels = torch.as_tensor(np.asarray(dataset.targets, dtype=np.int64))
    return torch.from_numpy(np.ascontiguousarray(dataset.data.transpose(0, 3, 1, 2))), labels
