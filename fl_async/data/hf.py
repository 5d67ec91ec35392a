"""Image datasets through Hugging Face ``datasets``: Hub ids, local parquet/arrow folders and
``save_to_disk`` folders, decoded once into uint8 tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fl_async.data.imageset import FederatedData, federated_data
from fl_async.data.split import stratified_split
from fl_async.extras import require

require("Hugging Face, disk: and parquet datasets", "datasets", "huggingface_hub")
import datasets  # noqa: E402 (after the check that names the extra to install)
import pyarrow as pa  # noqa: E402 (installed with datasets)

# Images decoded per batch: bounds the transient list of PIL images.
_DECODE_BATCH = 1024
_IMAGE_COLUMNS = ("image", "img")
_LABEL_COLUMNS = ("label", "labels", "fine_label")
OWNER_COLUMN = "writer_id"
"""The owner column read when none is named (FEMNIST's writers)."""
_GREY_MODES = ("1", "L")


def open_disk(path: Path) -> datasets.DatasetDict | datasets.Dataset:
    """A dataset written with ``save_to_disk``."""
    if not path.is_dir():
        raise FileNotFoundError(f"no save_to_disk folder at {path}")
    return datasets.load_from_disk(str(path))


def open_path(path: Path, *, root: Path | None) -> datasets.DatasetDict | datasets.Dataset:
    """A dataset stored at ``path``: a ``save_to_disk`` folder, a folder of data files, or one
    parquet file."""
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return open_disk(path)
    cache_dir = None if root is None else str(root)
    if path.is_file():
        return datasets.load_dataset("parquet", data_files=str(path), cache_dir=cache_dir)
    return datasets.load_dataset(str(path), cache_dir=cache_dir)


def to_federated(
    name: str,
    source: datasets.DatasetDict | datasets.Dataset,
    *,
    image_column: str | None,
    label_column: str | None,
    test_fraction: float,
    split_seed: int,
    owner_column: str | None = None,
) -> FederatedData:
    """Decode ``source`` into ``FederatedData``; without a test split, hold one out by class.

    The owners come from ``owner_column``, else from a ``writer_id`` column when there is one.
    """
    train, test = _train_test(source)
    image_column = image_column or _find_column(train, _IMAGE_COLUMNS, datasets.Image, "image")
    label_column = label_column or _find_column(train, _LABEL_COLUMNS, datasets.ClassLabel, "label")
    images, labels = _decode(train, image_column), _labels(train, label_column)
    owners = _owners(train, owner_column)
    if test is None:
        train_index, test_index = stratified_split(
            labels.numpy(), test_fraction=test_fraction, seed=split_seed
        )
        train_part = (images[train_index], labels[train_index])
        test_part = (images[test_index], labels[test_index])
        owners = None if owners is None else owners[train_index]
    else:
        train_part = (images, labels)
        test_part = (_decode(test, image_column), _labels(test, label_column))
    if train_part[0].shape[1:] != test_part[0].shape[1:]:
        raise ValueError(
            f"train images are {tuple(train_part[0].shape[1:])} but test images are "
            f"{tuple(test_part[0].shape[1:])}"
        )
    num_classes = _num_classes(train, label_column, train_part[1], test_part[1])
    return federated_data(
        name, train=train_part, test=test_part, num_classes=num_classes, owners=owners
    )


def train_labels(
    source: datasets.DatasetDict | datasets.Dataset,
    *,
    label_column: str | None,
    test_fraction: float,
    split_seed: int,
) -> np.ndarray:
    """Labels of the train split as ``to_federated`` builds it, without decoding any image."""
    train, test = _train_test(source)
    label_column = label_column or _find_column(train, _LABEL_COLUMNS, datasets.ClassLabel, "label")
    labels = _labels(train, label_column).numpy()
    if test is None:
        train_index, _ = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
        labels = labels[train_index]
    return labels


def train_owners(
    source: datasets.DatasetDict | datasets.Dataset,
    *,
    owner_column: str | None,
    label_column: str | None,
    test_fraction: float,
    split_seed: int,
) -> np.ndarray | None:
    """Owners of the train split as ``to_federated`` builds it (None without an owner column),
    without decoding any image."""
    train, test = _train_test(source)
    owners = _owners(train, owner_column)
    if owners is None or test is not None:
        return owners
    label_column = label_column or _find_column(train, _LABEL_COLUMNS, datasets.ClassLabel, "label")
    train_index, _ = stratified_split(
        _labels(train, label_column).numpy(), test_fraction=test_fraction, seed=split_seed
    )
    return owners[train_index]


def _owners(dataset: datasets.Dataset, column: str | None) -> np.ndarray | None:
    """The owner of each example as int64: integer ids as they are, strings as their rank among
    the sorted distinct ids. None when ``column`` is None and there is no ``writer_id`` column."""
    if column is None:
        if OWNER_COLUMN not in dataset.column_names:
            return None
        column = OWNER_COLUMN
    if column not in dataset.column_names:
        raise ValueError(f"no owner column {column!r} among {dataset.column_names}")
    values = dataset.with_format("arrow", columns=[column])[:][column]
    if values.null_count:
        raise ValueError(f"owner column {column!r} has {values.null_count} missing values")
    if pa.types.is_integer(values.type):
        return values.to_numpy().astype(np.int64)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        ids = values.to_numpy(zero_copy_only=False).astype(str)
        return np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)
    raise ValueError(f"owner column {column!r} must hold integer or string ids, got {values.type}")


def _train_test(
    source: datasets.DatasetDict | datasets.Dataset,
) -> tuple[datasets.Dataset, datasets.Dataset | None]:
    if isinstance(source, datasets.Dataset):
        return source, None
    splits = dict(source)
    if "train" in splits:
        return splits["train"], splits.get("test")
    if len(splits) == 1:
        return next(iter(splits.values())), None
    raise ValueError(f"no 'train' split among {sorted(splits)}")


def _find_column(
    dataset: datasets.Dataset, names: tuple[str, ...], feature_type: type, role: str
) -> str:
    for name in names:
        if name in dataset.column_names:
            return name
    for name, feature in dataset.features.items():
        if isinstance(feature, feature_type):
            return name
    raise ValueError(
        f"no {role} column among {dataset.column_names}; name it with {role}_column=..."
    )


def _decode(dataset: datasets.Dataset, column: str) -> torch.Tensor:
    feature = dataset.features[column]
    if isinstance(feature, datasets.Image):
        # One channel count for all: grey when the first image is grey, RGB otherwise.
        first_mode = dataset.with_format(None)[0][column].mode
        mode = "L" if first_mode in _GREY_MODES else "RGB"
        dataset = dataset.cast_column(column, datasets.Image(mode=mode))
    chunks = []
    for batch in dataset.with_format("numpy", columns=[column]).iter(batch_size=_DECODE_BATCH):
        array = batch[column]
        if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim not in (3, 4):
            raise ValueError(
                f"column {column!r} must hold uint8 images of one size (H×W or H×W×C); "
                "resize them before loading"
            )
        chunk = array[:, None] if array.ndim == 3 else array.transpose(0, 3, 1, 2)
        if chunks and chunk.shape[1:] != chunks[0].shape[1:]:
            raise ValueError(
                f"column {column!r} holds images of different sizes; resize them first"
            )
        chunks.append(chunk)
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(chunks)))


def _labels(dataset: datasets.Dataset, column: str) -> torch.Tensor:
    # One Arrow-to-numpy conversion; ``np.asarray(dataset[column])`` would loop in Python.
    labels = dataset.with_format("numpy", columns=[column])[:][column]
    if len(labels) == 0:
        raise ValueError("the dataset has no examples")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ValueError(f"column {column!r} must hold non-negative integer class labels")
    return torch.from_numpy(labels.astype(np.int64))


def _num_classes(
    dataset: datasets.Dataset, column: str, train: torch.Tensor, test: torch.Tensor
) -> int:
    feature = dataset.features[column]
    if isinstance(feature, datasets.ClassLabel):
        return int(feature.num_classes)
    return int(max(train.max(), test.max())) + 1
