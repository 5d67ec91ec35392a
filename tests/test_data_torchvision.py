"""Fashion-MNIST, MNIST and CIFAR-10/100 read by torchvision from tiny files in its real formats."""

import hashlib
import pickle

import numpy as np
import pytest
import torch
import torchvision.datasets
from idx_files import make_idx_set

from fl_async.data import load_dataset, load_labels

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize(
    ("name", "folder"), [("fashion-mnist", "FashionMNIST"), ("mnist", "MNIST")]
)
def test_idx_files(tmp_path, name, folder, compress):
    arrays = make_idx_set(tmp_path, folder, compress, RNG)
    data = load_dataset(name, root=tmp_path, source="torchvision")
    assert data.num_classes == 10
    assert data.train.images.shape == (20, 1, 28, 28) and data.train.images.dtype == torch.uint8
    np.testing.assert_array_equal(data.train.images[:, 0].numpy(), arrays["train"][0])
    np.testing.assert_array_equal(data.test.labels.numpy(), arrays["t10k"][1])
    np.testing.assert_array_equal(
        load_labels(name, root=tmp_path, source="torchvision"), arrays["train"][1]
    )


def test_auto_source_prefers_torchvision_files_under_root(tmp_path):
    make_idx_set(tmp_path, "FashionMNIST", compress=False, rng=RNG)
    data = load_dataset("fashion-mnist", root=tmp_path)
    assert data.name == "fashion-mnist" and len(data.train) == 20


def test_missing_idx_files_say_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("fashion-mnist", root=tmp_path, source="torchvision")
    message = str(error.value)
    assert str(tmp_path / "FashionMNIST" / "raw") in message
    assert "train-images-idx3-ubyte" in message and "download=True" in message


def write_pickle(path, obj):
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


def make_cifar10(root, per_batch=4, n_test=6):
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    images, labels = [], []
    for i in range(1, 6):
        data = RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        batch_labels = [(i + j) % 10 for j in range(per_batch)]
        write_pickle(folder / f"data_batch_{i}", {"data": data, "labels": batch_labels})
        images.append(data)
        labels += batch_labels
    test = RNG.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    write_pickle(folder / "test_batch", {"data": test, "labels": list(range(n_test))})
    write_pickle(folder / "batches.meta", {"label_names": [f"class{i}" for i in range(10)]})
    return folder, np.concatenate(images).reshape(-1, 3, 32, 32), np.array(labels)


def make_cifar100(root, n_train=8, n_test=4):
    folder = root / "cifar-100-python"
    folder.mkdir()
    train = RNG.integers(0, 256, (n_train, 3072), dtype=np.uint8)
    fine = [i * 11 % 100 for i in range(n_train)]
    write_pickle(
        folder / "train", {"data": train, "fine_labels": fine, "coarse_labels": [0] * n_train}
    )
    test = RNG.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    write_pickle(
        folder / "test", {"data": test, "fine_labels": [1] * n_test, "coarse_labels": [0] * n_test}
    )
    write_pickle(
        folder / "meta",
        {
            "fine_label_names": [f"f{i}" for i in range(100)],
            "coarse_label_names": [f"c{i}" for i in range(20)],
        },
    )
    return folder, train.reshape(-1, 3, 32, 32), np.array(fine)


def md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def trust_fixture_checksums(monkeypatch, dataset_class, folder):
    """Point torchvision's md5 table at the fixture's own files, so its integrity check still
    runs for real (on these files) instead of being switched off."""
    for attribute in ("train_list", "test_list"):
        entries = [[name, md5(folder / name)] for name, _ in getattr(dataset_class, attribute)]
        monkeypatch.setattr(dataset_class, attribute, entries)
    meta = dict(dataset_class.meta, md5=md5(folder / dataset_class.meta["filename"]))
    monkeypatch.setattr(dataset_class, "meta", meta)


def test_cifar10_pickles(tmp_path, monkeypatch):
    folder, images, labels = make_cifar10(tmp_path)
    trust_fixture_checksums(monkeypatch, torchvision.datasets.CIFAR10, folder)
    data = load_dataset("cifar10", root=tmp_path)
    assert data.num_classes == 10 and data.image_shape == (3, 32, 32)
    assert data.train.images.is_contiguous() and data.train.images.dtype == torch.uint8
    np.testing.assert_array_equal(data.train.images.numpy(), images)
    np.testing.assert_array_equal(data.train.labels.numpy(), labels)
    assert len(data.test) == 6 and len(data.mean) == 3
    np.testing.assert_array_equal(load_labels("cifar10", root=tmp_path), labels)


def test_cifar100_pickles_use_fine_labels(tmp_path, monkeypatch):
    folder, images, fine = make_cifar100(tmp_path)
    trust_fixture_checksums(monkeypatch, torchvision.datasets.CIFAR100, folder)
    data = load_dataset("cifar100", root=tmp_path, source="torchvision")
    assert data.num_classes == 100
    np.testing.assert_array_equal(data.train.images.numpy(), images)
    np.testing.assert_array_equal(data.train.labels.numpy(), fine)


def test_cifar_checksum_mismatch_names_the_folder(tmp_path):
    folder, _, _ = make_cifar10(tmp_path)
    # The fixture's files cannot match the md5 sums torchvision knows for the real CIFAR-10.
    with pytest.raises(RuntimeError, match="corrupted") as error:
        load_dataset("cifar10", root=tmp_path, source="torchvision")
    assert str(folder) in str(error.value)


def test_missing_cifar_file(tmp_path):
    folder, _, _ = make_cifar10(tmp_path)
    (folder / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="test_batch"):
        load_dataset("cifar10", root=tmp_path, source="torchvision")
