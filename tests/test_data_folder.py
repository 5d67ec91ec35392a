"""A user's own PNGs in class folders, read through torchvision's ImageFolder."""

import numpy as np
import pytest
import torch
from PIL import Image

from fl_async.data import load_dataset, load_labels

RNG = np.random.default_rng(0)


def write_pngs(folder, per_class, shape=(8, 8), classes=("cat", "dog")):
    """PNGs under ``folder/<class>/``; returns the arrays in ImageFolder's (sorted) order."""
    arrays = []
    for name in sorted(classes):
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            array = RNG.integers(0, 256, shape, dtype=np.uint8)
            Image.fromarray(array).save(folder / name / f"{i:03d}.png")
            arrays.append(array)
    return np.stack(arrays)


def test_grey_folder_with_held_out_split(tmp_path):
    arrays = write_pngs(tmp_path, per_class=5)
    data = load_dataset(f"imagefolder:{tmp_path}", test_fraction=0.2, split_seed=0)
    assert data.num_classes == 2 and data.image_shape == (1, 8, 8)
    assert (len(data.train), len(data.test)) == (8, 2)
    assert torch.bincount(data.test.labels).tolist() == [1, 1]
    every = torch.cat([data.train.images, data.test.images])[:, 0].numpy()
    # Lossless PNG: the decoded pixels are the written ones, in some order.
    assert sorted(map(bytes, every)) == sorted(map(bytes, arrays))
    np.testing.assert_array_equal(
        load_labels(f"imagefolder:{tmp_path}", test_fraction=0.2), data.train.labels.numpy()
    )


def test_colour_folder_with_train_and_test(tmp_path):
    train = write_pngs(tmp_path / "train", per_class=3, shape=(6, 6, 3))
    test = write_pngs(tmp_path / "test", per_class=1, shape=(6, 6, 3))
    data = load_dataset(f"imagefolder:{tmp_path}")
    assert data.image_shape == (3, 6, 6)
    np.testing.assert_array_equal(data.train.images.numpy(), train.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(data.test.images.numpy(), test.transpose(0, 3, 1, 2))
    assert data.train.labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_mismatched_classes_and_sizes_are_rejected(tmp_path):
    write_pngs(tmp_path / "a" / "train", per_class=2)
    write_pngs(tmp_path / "a" / "test", per_class=1, classes=("cat", "eel"))
    with pytest.raises(ValueError, match="classes"):
        load_dataset(f"imagefolder:{tmp_path / 'a'}")
    write_pngs(tmp_path / "b", per_class=2)
    Image.fromarray(np.zeros((9, 9), dtype=np.uint8)).save(tmp_path / "b" / "dog" / "big.png")
    with pytest.raises(ValueError, match="one size"):
        load_dataset(f"imagefolder:{tmp_path / 'b'}")


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no image folder"):
        load_dataset(f"imagefolder:{tmp_path / 'absent'}")
