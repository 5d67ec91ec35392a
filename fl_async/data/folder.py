"""A user's own images in class folders (torchvision ``ImageFolder``), decoded once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image

from fl_async.data.imageset import FederatedData, federated_data
from fl_async.data.split import stratified_split

if TYPE_CHECKING:
    from torchvision.datasets import ImageFolder

_GREY_MODES = ("1", "L")


def load_folder(path: Path, *, test_fraction: float, split_seed: int) -> FederatedData:
    """Images under ``path/<class>/``, or ``path/train/<class>/`` and ``path/test/<class>/``."""
    if (path / "train").is_dir() and (path / "test").is_dir():
        train, test = _scan(path / "train"), _scan(path / "test")
        if test.classes != train.classes:
            raise ValueError(
                f"{path}/train has classes {train.classes} but {path}/test has {test.classes}"
            )
        mode = _mode(train)
        train_part, test_part = _decode(train, mode), _decode(test, mode)
    else:
        train = _scan(path)
        images, labels = _decode(train, _mode(train))
        train_index, test_index = stratified_split(
            labels.numpy(), test_fraction=test_fraction, seed=split_seed
        )
        train_part = (images[train_index], labels[train_index])
        test_part = (images[test_index], labels[test_index])
    if train_part[0].shape[1:] != test_part[0].shape[1:]:
        raise ValueError(f"train and test images under {path} differ in size")
    return federated_data(
        f"imagefolder:{path}", train=train_part, test=test_part, num_classes=len(train.classes)
    )


def folder_labels(path: Path, *, test_fraction: float, split_seed: int) -> np.ndarray:
    """Labels of the train split ``load_folder`` builds, read from folder names only."""
    if (path / "train").is_dir() and (path / "test").is_dir():
        return np.asarray(_scan(path / "train").targets, dtype=np.int64)
    labels = np.asarray(_scan(path).targets, dtype=np.int64)
    train_index, _ = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
    return labels[train_index]


def _scan(path: Path) -> ImageFolder:
    from torchvision.datasets import ImageFolder  # imported here: torchvision adds ~1 s

    if not path.is_dir():
        raise FileNotFoundError(f"no image folder at {path}")
    # The loader keeps the file path; ``_decode`` opens each image once, in the chosen mode.
    return ImageFolder(str(path), loader=str)


def _mode(folder: ImageFolder) -> str:
    with Image.open(folder.samples[0][0]) as first:
        return "L" if first.mode in _GREY_MODES else "RGB"


def _decode(folder: ImageFolder, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = []
    size = None
    for file, _ in folder.samples:
        with Image.open(file) as image:
            array = np.asarray(image.convert(mode), dtype=np.uint8)
        if size is None:
            size = array.shape
        elif array.shape != size:
            raise ValueError(
                f"{file} is {array.shape[:2]} but earlier images are {size[:2]}; "
                "resize all images to one size first"
            )
        arrays.append(array)
    images = np.stack(arrays)
    images = images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)
    labels = torch.as_tensor(folder.targets, dtype=torch.int64)
    return torch.from_numpy(np.ascontiguousarray(images)), labels
