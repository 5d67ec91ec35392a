"""FEMNIST from a tiny copy in the Hub cache layout, and the owners of each train example."""

import datasets
import numpy as np
import pytest
import torch
from femnist_files import CHARACTERS, row_of, write_femnist

from fl_async.data import HUB_IDS, FederatedData, load_dataset, load_labels, load_owners
from fl_async.data.imageset import federated_data
from fl_async.partitioning import natural
from fl_async.validation import InvalidArgument


@pytest.fixture(scope="module")
def femnist(tmp_path_factory):
    """The Hub cache holding the tiny FEMNIST, and the table written into it."""
    cache = tmp_path_factory.mktemp("hub")
    return cache, write_femnist(cache)


def test_femnist_is_read_from_the_hub_cache_with_its_writers(femnist):
    cache, table = femnist
    assert HUB_IDS["femnist"] == "flwrlabs/femnist" and len(CHARACTERS) == 62
    data = load_dataset("femnist", root=cache)
    assert data.name == "femnist" and data.num_classes == 62
    assert data.image_shape == (1, 28, 28) and data.train.images.dtype == torch.uint8
    # One split only: a fifth of each class is held out.
    per_class = np.bincount(table["character"])
    held_out = np.round(per_class * 0.2).astype(int)
    assert torch.bincount(data.test.labels, minlength=10).tolist() == held_out.tolist()
    assert len(data.train) == 120 - held_out.sum()
    rows = row_of(data.train.images)
    np.testing.assert_array_equal(data.train.labels.numpy(), np.array(table["character"])[rows])
    # Owner i is the writer of train example i, as its rank among the sorted writer ids.
    writers = np.array(table["writer_id"])
    assert data.owners.dtype == np.int64 and data.owners.shape == (len(data.train),)
    np.testing.assert_array_equal(np.unique(writers)[data.owners], writers[rows])


def test_labels_and_owners_are_read_without_the_images_and_agree(femnist):
    cache, _ = femnist
    data = load_dataset("femnist", root=cache, split_seed=4, test_fraction=0.25)
    labels = load_labels("femnist", root=cache, split_seed=4, test_fraction=0.25)
    owners = load_owners("femnist", root=cache, split_seed=4, test_fraction=0.25)
    np.testing.assert_array_equal(labels, data.train.labels.numpy())
    np.testing.assert_array_equal(owners, data.owners)
    # A natural split of 8 writers into 4 partitions: two writers each.
    parts = natural(labels, 4, owners, seed=0)
    assert all(np.unique(owners[part]).size == 2 for part in parts)


def test_an_owner_column_can_be_named(femnist):
    cache, table = femnist
    data = load_dataset("femnist", root=cache, owner_column="hsf_id")
    rows = row_of(data.train.images)
    np.testing.assert_array_equal(data.owners, np.array(table["hsf_id"])[rows])
    np.testing.assert_array_equal(
        load_owners("femnist", root=cache, owner_column="hsf_id"), data.owners
    )
    with pytest.raises(ValueError, match="no owner column 'user' among"):
        load_owners("femnist", root=cache, owner_column="user")
    with pytest.raises(ValueError, match="must hold integer or string ids"):
        load_dataset("femnist", root=cache, owner_column="image")


def test_a_dataset_with_a_test_split_gives_owners_of_its_train_split(tmp_path):
    def split(writers):
        images = [np.full((4, 4), i, dtype=np.uint8) for i in range(len(writers))]
        return datasets.Dataset.from_dict(
            {"image": images, "label": [0, 1] * (len(writers) // 2), "writer_id": writers},
            features=datasets.Features(
                {
                    "image": datasets.Image(),
                    "label": datasets.Value("int64"),
                    "writer_id": datasets.Value("string"),
                }
            ),
        )

    datasets.DatasetDict(train=split(["b", "a", "c", "b"]), test=split(["z", "z"])).save_to_disk(
        tmp_path / "own"
    )
    assert load_owners(f"disk:{tmp_path / 'own'}").tolist() == [1, 0, 2, 1]
    assert load_dataset(f"disk:{tmp_path / 'own'}").owners.tolist() == [1, 0, 2, 1]


def test_datasets_without_owners_say_which_have_them(tmp_path):
    expected = "dataset 'mnist' has no natural owners; natural works with: femnist, synthetic"
    with pytest.raises(InvalidArgument, match=expected):
        load_owners("mnist")
    with pytest.raises(InvalidArgument, match=expected):
        load_dataset("mnist", owner_column="writer_id")
    assert load_dataset("mnist").owners is None
    plain = datasets.Dataset.from_dict(
        {"image": [np.zeros((4, 4), np.uint8)] * 4, "label": [0, 1, 0, 1]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}),
    )
    plain.save_to_disk(tmp_path / "plain")
    with pytest.raises(InvalidArgument, match="has no natural owners.*owner column"):
        load_owners(f"disk:{tmp_path / 'plain'}", test_fraction=0.5)
    assert load_dataset(f"disk:{tmp_path / 'plain'}", test_fraction=0.5).owners is None


def test_femnist_names_its_sources(tmp_path):
    with pytest.raises(InvalidArgument, match="torchvision reads only .*; got 'femnist'"):
        load_dataset("femnist", source="torchvision")
    with pytest.raises(FileNotFoundError, match="flwrlabs/femnist"):
        load_dataset("femnist", root=tmp_path)


def test_federated_data_checks_its_owners():
    images = torch.zeros((3, 1, 2, 2), dtype=torch.uint8)
    labels = torch.tensor([0, 1, 0])
    train = (images, labels)
    data = federated_data("x", train, train, 2, owners=np.array([5, 5, 7]))
    assert isinstance(data, FederatedData) and data.owners.tolist() == [5, 5, 7]
    with pytest.raises(InvalidArgument, match=r"int64 of shape \(3,\), one id per train example"):
        federated_data("x", train, train, 2, owners=np.array([5, 7]))
    with pytest.raises(InvalidArgument, match="got float64 of shape"):
        federated_data("x", train, train, 2, owners=np.zeros(3))
    with pytest.raises(InvalidArgument, match="must be a numpy array or None, got"):
        federated_data("x", train, train, 2, owners=[5, 5, 7])
