"""Dataset names and sources: what is accepted, and the errors for the rest."""

import pytest

from fl_async.data import NAMES, default_root, load_dataset, load_labels
from fl_async.validation import InvalidArgument


@pytest.mark.parametrize("name", ["imagenet", "cifar-10", ""])
def test_unknown_names_list_the_allowed_ones(name):
    with pytest.raises(InvalidArgument, match=f"unknown dataset '{name}'; choose one of") as error:
        load_dataset(name)
    assert all(allowed in str(error.value) for allowed in NAMES)
    with pytest.raises(InvalidArgument, match=f"unknown dataset '{name}'"):
        load_labels(name)


def test_unknown_source():
    message = "source must be one of 'auto', 'torchvision', 'huggingface', got 'tfds'"
    with pytest.raises(InvalidArgument, match=message):
        load_dataset("mnist", source="tfds")


def test_torchvision_reads_only_its_own_sets():
    with pytest.raises(InvalidArgument, match="torchvision reads only .*; got 'uoft-cs/cifar10'"):
        load_dataset("uoft-cs/cifar10", source="torchvision")


def test_default_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FL_ASYNC_DATA", str(tmp_path))
    assert default_root() == tmp_path
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_dataset("fashion-mnist", source="torchvision")
    monkeypatch.delenv("FL_ASYNC_DATA")
    assert default_root().name == "fl-async"
