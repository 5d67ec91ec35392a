"""Fashion-MNIST, MNIST and CIFAR-10/100 read by torchvision from tiny files in its real formats."""

import gzip

import numpy as np
import pytest
import torch
import torchvision.datasets
from cifar_files import make_cifar10, make_cifar100, trust_fixture_checksums
from fresh_python import python_stdout
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


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
def test_idx_files_give_what_torchvisions_class_gives(tmp_path, compress):
    """fl-async reads IDX files with numpy; torchvision's FashionMNIST reads the same bytes."""
    make_idx_set(tmp_path, "FashionMNIST", compress, RNG, n_train=30)
    data = load_dataset("fashion-mnist", root=tmp_path, source="torchvision")
    if compress:  # torchvision reads the unpacked files only
        for packed in (tmp_path / "FashionMNIST" / "raw").glob("*.gz"):
            packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
    for split, train in ((data.train, True), (data.test, False)):
        theirs = torchvision.datasets.FashionMNIST(str(tmp_path), train=train)
        assert torch.equal(split.labels, theirs.targets)
        assert torch.equal(split.images, theirs.data.unsqueeze(1))
        assert split.images.is_contiguous()


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda b: b[:-5], "holds 7851 bytes; its header shape (10, 28, 28) needs 7856"),
        (lambda b: b[:9], "its header is cut short"),
        (lambda b: b"\x01" + b[1:], "does not start with two zero bytes"),
        (lambda b: b[:2] + b"\x0d" + b[3:], "type code 0x0d with 3 dimension(s)"),
    ],
    ids=["short", "header", "magic", "float"],
)
def test_a_damaged_idx_file_is_refused_naming_it_and_the_fetch_command(tmp_path, damage, says):
    make_idx_set(tmp_path, "FashionMNIST", compress=False, rng=RNG)
    images = tmp_path / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte"
    images.write_bytes(damage(images.read_bytes()))
    with pytest.raises(RuntimeError) as error:
        load_dataset("fashion-mnist", root=tmp_path, source="torchvision")
    assert f"{images}" in str(error.value) and says in str(error.value)
    assert f"fl-async data download fashion-mnist --root {tmp_path}" in str(error.value)


@pytest.mark.parametrize("damage", [lambda b: b[:-9], lambda b: b[:20] + bytes(40) + b[60:]])
def test_a_damaged_gz_idx_file_is_refused_naming_it(tmp_path, damage):
    make_idx_set(tmp_path, "FashionMNIST", compress=True, rng=RNG)
    packed = tmp_path / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    packed.write_bytes(damage(packed.read_bytes()))
    with pytest.raises(RuntimeError, match="is not a readable gzip file") as error:
        load_labels("fashion-mnist", root=tmp_path, source="torchvision")
    assert str(packed) in str(error.value) and "fl-async data download" in str(error.value)


def test_reading_idx_files_imports_no_torchvision(tmp_path):
    """torchvision's import loads torch._dynamo: about 3 CPU-seconds in each process (a
    ServerApp, every actor) that reads Fashion-MNIST."""
    make_idx_set(tmp_path, "FashionMNIST", compress=True, rng=RNG)
    code = (
        "import sys\n"
        "from fl_async.data import load_dataset, load_labels\n"
        f"load_dataset('fashion-mnist', root={str(tmp_path)!r})\n"
        f"load_labels('fashion-mnist', root={str(tmp_path)!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torchvision'))\n"
    )
    assert python_stdout(code).strip() == "[]"


def test_auto_source_prefers_torchvision_files_under_root(tmp_path):
    make_idx_set(tmp_path, "FashionMNIST", compress=False, rng=RNG)
    data = load_dataset("fashion-mnist", root=tmp_path)
    assert data.name == "fashion-mnist" and len(data.train) == 20


def test_missing_idx_files_say_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("fashion-mnist", root=tmp_path, source="torchvision")
    message = str(error.value)
    assert str(tmp_path / "FashionMNIST" / "raw") in message
    assert "train-images-idx3-ubyte" in message
    assert f"fetch it with: fl-async data download fashion-mnist --root {tmp_path}" in message


def test_cifar10_pickles(tmp_path, monkeypatch):
    folder, images, labels = make_cifar10(tmp_path, RNG)
    trust_fixture_checksums(monkeypatch, torchvision.datasets.CIFAR10, folder)
    data = load_dataset("cifar10", root=tmp_path)
    assert data.num_classes == 10 and data.image_shape == (3, 32, 32)
    assert data.train.images.is_contiguous() and data.train.images.dtype == torch.uint8
    np.testing.assert_array_equal(data.train.images.numpy(), images)
    np.testing.assert_array_equal(data.train.labels.numpy(), labels)
    assert len(data.test) == 6 and len(data.mean) == 3
    np.testing.assert_array_equal(load_labels("cifar10", root=tmp_path), labels)


def test_cifar100_pickles_use_fine_labels(tmp_path, monkeypatch):
    folder, images, fine = make_cifar100(tmp_path, RNG)
    trust_fixture_checksums(monkeypatch, torchvision.datasets.CIFAR100, folder)
    data = load_dataset("cifar100", root=tmp_path, source="torchvision")
    assert data.num_classes == 100
    np.testing.assert_array_equal(data.train.images.numpy(), images)
    np.testing.assert_array_equal(data.train.labels.numpy(), fine)


def test_cifar_checksum_mismatch_names_the_folder(tmp_path):
    folder, _, _ = make_cifar10(tmp_path, RNG)
    # The fixture's files cannot match the md5 sums torchvision knows for the real CIFAR-10.
    with pytest.raises(RuntimeError, match="corrupted") as error:
        load_dataset("cifar10", root=tmp_path, source="torchvision")
    assert str(folder) in str(error.value)
    assert f"fl-async data download cifar10 --root {tmp_path}" in str(error.value)


def test_missing_cifar_file(tmp_path):
    folder, _, _ = make_cifar10(tmp_path, RNG)
    (folder / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="test_batch"):
        load_dataset("cifar10", root=tmp_path, source="torchvision")
