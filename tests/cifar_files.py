"""Tiny CIFAR-10/100 files in their real on-disk formats (pickled batches, the published
tarballs), and torchvision's md5 tables pointed at them."""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np

CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
CIFAR_TARBALLS = {"cifar10": "cifar-10-python.tar.gz", "cifar100": "cifar-100-python.tar.gz"}


def write_pickle(path: Path, obj: object) -> None:
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


def make_cifar10(
    root: Path, rng: np.random.Generator, per_batch: int = 4, n_test: int = 6
) -> tuple[Path, np.ndarray, np.ndarray]:
    """``root/cifar-10-batches-py`` with five training batches, a test batch and the meta."""
    folder = root / CIFAR_FOLDERS["cifar10"]
    folder.mkdir(parents=True)
    images, labels = [], []
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        batch_labels = [(i + j) % 10 for j in range(per_batch)]
        write_pickle(folder / f"data_batch_{i}", {"data": data, "labels": batch_labels})
        images.append(data)
        labels += batch_labels
    test = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    write_pickle(folder / "test_batch", {"data": test, "labels": list(range(n_test))})
    write_pickle(folder / "batches.meta", {"label_names": [f"class{i}" for i in range(10)]})
    return folder, np.concatenate(images).reshape(-1, 3, 32, 32), np.array(labels)


def make_cifar100(
    root: Path, rng: np.random.Generator, n_train: int = 8, n_test: int = 4
) -> tuple[Path, np.ndarray, np.ndarray]:
    """``root/cifar-100-python`` with its train, test and meta pickles (fine and coarse labels)."""
    folder = root / CIFAR_FOLDERS["cifar100"]
    folder.mkdir(parents=True)
    train = rng.integers(0, 256, (n_train, 3072), dtype=np.uint8)
    fine = [i * 11 % 100 for i in range(n_train)]
    write_pickle(
        folder / "train", {"data": train, "fine_labels": fine, "coarse_labels": [0] * n_train}
    )
    test = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    test_labels = [i % 100 for i in range(n_test)]
    write_pickle(
        folder / "test", {"data": test, "fine_labels": test_labels, "coarse_labels": [0] * n_test}
    )
    write_pickle(
        folder / "meta",
        {
            "fine_label_names": [f"f{i}" for i in range(100)],
            "coarse_label_names": [f"c{i}" for i in range(20)],
        },
    )
    return folder, train.reshape(-1, 3, 32, 32), np.array(fine)


def tarball(folder: Path) -> bytes:
    """``folder`` as a .tar.gz holding it by name, as the published CIFAR archives do."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return buffer.getvalue()


def md5(data: bytes | Path) -> str:
    return hashlib.md5(data.read_bytes() if isinstance(data, Path) else data).hexdigest()


def fixture_checksums(dataset_class: type, folder: Path) -> dict[str, object]:
    """The class attributes that make torchvision's integrity check pass on ``folder``'s files
    (and only on them): its md5 table, pointed at the fixture instead of switched off."""
    table: dict[str, object] = {
        attribute: [[name, md5(folder / name)] for name, _ in getattr(dataset_class, attribute)]
        for attribute in ("train_list", "test_list")
    }
    table["meta"] = dict(dataset_class.meta, md5=md5(folder / dataset_class.meta["filename"]))
    return table


def trust_fixture_checksums(monkeypatch, dataset_class: type, folder: Path) -> None:
    """Point torchvision's md5 table at the fixture's own files, so its integrity check still
    runs for real (on these files) instead of being switched off."""
    for attribute, value in fixture_checksums(dataset_class, folder).items():
        monkeypatch.setattr(dataset_class, attribute, value)
