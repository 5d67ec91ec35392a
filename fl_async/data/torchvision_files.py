"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from torchvision's on-disk layouts under a root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

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
    """Read ``name`` with its torchvision class from ``root`` (downloading only when asked)."""
    from fl_async.data.imageset import federated_data

    train = _open(name, root=root, train=True, download=download)
    test = _open(name, root=root, train=False, download=False)
    return federated_data(
        name, train=_tensors(train), test=_tensors(test), num_classes=len(train.classes)
    )


def torchvision_labels(name: str, *, root: Path, download: bool) -> np.ndarray:
    """Training labels of ``name`` read with its torchvision class."""
    dataset = _open(name, root=root, train=True, download=download)
    return np.asarray(dataset.targets, dtype=np.int64)


def _open(name: str, *, root: Path, train: bool, download: bool) -> MNIST | CIFAR10:
    import torchvision.datasets  # imported here: it adds ~1 s that the embedded default avoids

    spec = TORCHVISION_SETS[name]
    if not download:
        _require_files(name, root)
        _decompress_idx(spec, root)
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


def _decompress_idx(spec: TorchvisionSet, root: Path) -> None:
    # torchvision reads only the decompressed IDX files; when a user copied the .gz files by hand,
    # unpack them in place exactly as torchvision's own download step would.
    from torchvision.datasets.utils import extract_archive

    where = spec.location(root)
    for name in spec.files:
        packed = where / f"{name}.gz"
        if not (where / name).is_file() and packed.is_file():
            extract_archive(str(packed), str(where))


def _tensors(dataset: MNIST | CIFAR10) -> tuple[torch.Tensor, torch.Tensor]:
    # torch here (torchvision has loaded it by now): the launcher imports this module for its
    # table of datasets only, and runs without torch.
    import torch

    labels = torch.as_tensor(np.asarray(dataset.targets, dtype=np.int64))
    data = dataset.data
    if isinstance(data, torch.Tensor):  # the MNIST family: N×H×W uint8
        return data.unsqueeze(1).contiguous(), labels
    # CIFAR: N×H×W×C uint8 numpy
    return torch.from_numpy(np.ascontiguousarray(data.transpose(0, 3, 1, 2))), labels
