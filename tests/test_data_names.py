"""Dataset names and sources: what is accepted, and the errors for the rest."""

import pytest

from fl_async.data import NAMES, default_root, load_dataset, load_labels


@pytest.mark.parametrize("name", ["imagenet", "cifar-10", ""])
def test_unknown_names_list_the_allowed_ones(name):
    with pytest.raises(ValueError, match="unknown dataset") as error:
        load_dataset(name)
    assert all(allowed in str(error.value) for allowed in NAMES)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_labels(name)


def test_unknown_source():
    with pytest.raises(ValueError, match="auto, torchvision, huggingface"):
        load_dataset("mnist", source="tfds")


def test_torchvision_reads_only_its_own_sets():
    with pytest.raises(ValueError, match="torchvision reads only"):
        load_dataset("uoft-cs/cifar10", source="torchvision")


def test_default_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FL_ASYNC_DATA", str(tmp_path))
    assert default_root() == tmp_path
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_dataset("fashion-mnist", source="torchvision")
    monkeypatch.delenv("FL_ASYNC_DATA")
    assert default_root().name == "fl-async"
