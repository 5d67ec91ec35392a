"""Hugging Face sources from tiny local files: save_to_disk folders, parquet, and a Hub cache."""

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from fl_async.data import load_dataset, load_labels

RNG = np.random.default_rng(0)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def pictures(count, shape):
    arrays = RNG.integers(0, 256, (count, *shape), dtype=np.uint8)
    return arrays, [Image.fromarray(array) for array in arrays]


def grey_split(count, num_classes=10):
    arrays, images = pictures(count, (28, 28))
    labels = [i % num_classes for i in range(count)]
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=num_classes)}
    )
    return arrays, datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)


def cifar100_split(count):
    arrays, images = pictures(count, (32, 32, 3))
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "fine_label": datasets.ClassLabel(num_classes=100),
            "coarse_label": datasets.ClassLabel(num_classes=20),
        }
    )
    columns = {"img": images, "fine_label": [7 * i % 100 for i in range(count)]}
    columns["coarse_label"] = [0] * count
    return arrays, datasets.Dataset.from_dict(columns, features=features)


def test_save_to_disk_dataset_dict(tmp_path):
    train_arrays, train = grey_split(20)
    test_arrays, test = grey_split(10)
    datasets.DatasetDict(train=train, test=test).save_to_disk(tmp_path / "saved")
    data = load_dataset(f"disk:{tmp_path / 'saved'}")
    assert data.num_classes == 10 and data.image_shape == (1, 28, 28)
    assert data.train.images.dtype == torch.uint8 and data.train.labels.dtype == torch.int64
    np.testing.assert_array_equal(data.train.images[:, 0].numpy(), train_arrays)
    np.testing.assert_array_equal(data.test.images[:, 0].numpy(), test_arrays)
    assert data.test.mean == data.train.mean
    # A plain path to the same folder is recognised as a save_to_disk folder.
    assert torch.equal(load_dataset(str(tmp_path / "saved")).train.labels, data.train.labels)


def test_single_split_holds_out_a_stratified_test_set(tmp_path):
    _, dataset = grey_split(50, num_classes=5)
    dataset.save_to_disk(tmp_path / "one")
    data = load_dataset(f"disk:{tmp_path / 'one'}", test_fraction=0.2, split_seed=3)
    assert (len(data.train), len(data.test)) == (40, 10)
    assert torch.bincount(data.test.labels).tolist() == [2] * 5
    np.testing.assert_array_equal(
        load_labels(f"disk:{tmp_path / 'one'}", test_fraction=0.2, split_seed=3),
        data.train.labels.numpy(),
    )


def test_parquet_folder_of_colour_images(tmp_path):
    train_arrays, train = cifar100_split(12)
    test_arrays, test = cifar100_split(4)
    folder = tmp_path / "parquet"
    train.to_parquet(folder / "train.parquet")
    test.to_parquet(folder / "test.parquet")
    data = load_dataset(str(folder), root=tmp_path / "cache")
    assert data.image_shape == (3, 32, 32) and data.num_classes == 100
    np.testing.assert_array_equal(data.train.images.numpy(), train_arrays.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(data.train.labels.numpy(), [7 * i % 100 for i in range(12)])
    assert len(data.test) == 4


def test_single_parquet_file(tmp_path):
    _, dataset = grey_split(50)
    dataset.to_parquet(tmp_path / "digits.parquet")
    data = load_dataset(str(tmp_path / "digits.parquet"), root=tmp_path / "cache")
    assert (len(data.train), len(data.test)) == (40, 10)


def fake_hub_cache(cache, repo_id, splits):
    """The layout huggingface_hub leaves after a download: refs/main names a snapshot folder."""
    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT / "plain_text"
    for split, dataset in splits.items():
        dataset.to_parquet(snapshot / f"{split}-00000-of-00001.parquet")


def test_hub_id_from_the_local_cache(tmp_path):
    _, train = cifar100_split(10)
    _, test = cifar100_split(5)
    fake_hub_cache(tmp_path, "uoft-cs/cifar100", {"train": train, "test": test})
    data = load_dataset("cifar100", root=tmp_path, source="huggingface")
    assert data.num_classes == 100 and (len(data.train), len(data.test)) == (10, 5)
    assert data.name == "cifar100"
    same = load_dataset("uoft-cs/cifar100", root=tmp_path)
    assert torch.equal(same.train.images, data.train.images)


def test_auto_falls_back_to_the_hub_cache(tmp_path):
    _, train = grey_split(10)
    _, test = grey_split(5)
    fake_hub_cache(tmp_path, "zalando-datasets/fashion_mnist", {"train": train, "test": test})
    data = load_dataset("fashion-mnist", root=tmp_path)
    assert data.image_shape == (1, 28, 28) and len(data.train) == 10
    np.testing.assert_array_equal(load_labels("fashion-mnist", root=tmp_path), data.train.labels)


def test_missing_everywhere_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("cifar10", root=tmp_path)
    message = str(error.value)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert "uoft-cs/cifar10" in message
    assert f"fetch it with: fl-async data download cifar10 --root {tmp_path}" in message
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("someone/missing", root=tmp_path)
    assert f"fetch it with: fl-async data download someone/missing --root {tmp_path}" in str(
        error.value
    )


def test_images_of_different_sizes_are_rejected(tmp_path):
    _, small = pictures(2, (8, 8))
    _, large = pictures(2, (9, 9))
    dataset = datasets.Dataset.from_dict(
        {"image": small + large, "label": [0, 1, 0, 1]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}),
    )
    dataset.save_to_disk(tmp_path / "mixed")
    with pytest.raises(ValueError, match="one size"):
        load_dataset(f"disk:{tmp_path / 'mixed'}", test_fraction=0.5)


def test_columns_can_be_named(tmp_path):
    arrays, images = pictures(6, (8, 8))
    dataset = datasets.Dataset.from_dict(
        {"picture": images, "digit": [0, 1, 2] * 2, "other": [9] * 6},
        features=datasets.Features(
            {
                "picture": datasets.Image(),
                "digit": datasets.Value("int64"),
                "other": datasets.Value("int64"),
            }
        ),
    )
    datasets.DatasetDict(train=dataset, test=dataset).save_to_disk(tmp_path / "named")
    data = load_dataset(f"disk:{tmp_path / 'named'}", label_column="digit")
    assert data.num_classes == 3  # no ClassLabel: the largest label + 1
    np.testing.assert_array_equal(data.train.images[:, 0].numpy(), arrays)
    with pytest.raises(ValueError, match="label column"):
        load_dataset(f"disk:{tmp_path / 'named'}")
