"""The embedded MNIST default, the stratified split and per-batch normalisation."""

import numpy as np
import pytest
import torch

from fl_async.data import (
    ImageSet,
    as_index,
    iter_batches,
    load_dataset,
    load_labels,
    normalize,
    stratified_split,
)
from fl_async.validation import InvalidArgument


@pytest.fixture(scope="module")
def mnist():
    return load_dataset()


def test_mnist_shapes_and_types(mnist):
    assert mnist.name == "mnist"
    assert mnist.num_classes == 10
    assert mnist.image_shape == (1, 28, 28)
    assert mnist.train.images.shape == (4000, 1, 28, 28)
    assert mnist.test.images.shape == (1000, 1, 28, 28)
    assert mnist.train.images.dtype == torch.uint8
    assert mnist.train.labels.dtype == torch.int64
    assert int(mnist.train.images.max()) == 255
    # The test split is normalised with the train split's statistics.
    assert mnist.test.mean == mnist.train.mean == mnist.mean
    assert mnist.mean[0] == pytest.approx(0.13, abs=0.01)  # MNIST's well-known mean
    assert mnist.std[0] == pytest.approx(0.31, abs=0.01)


def test_mnist_split_is_stratified_disjoint_and_shuffled(mnist):
    assert torch.bincount(mnist.train.labels).tolist() == [400] * 10
    assert torch.bincount(mnist.test.labels).tolist() == [100] * 10
    train_rows = {bytes(row) for row in mnist.train.images.flatten(1).numpy()}
    assert not any(bytes(row) in train_rows for row in mnist.test.images.flatten(1).numpy())
    # The CSV is sorted by digit; the split must not be.
    assert len(set(mnist.train.labels[:50].tolist())) > 5


def test_mnist_split_is_deterministic(mnist):
    again = load_dataset("mnist")
    assert torch.equal(again.train.images, mnist.train.images)
    assert torch.equal(again.test.labels, mnist.test.labels)
    other = load_dataset("mnist", split_seed=1)
    assert not torch.equal(other.train.labels, mnist.train.labels)
    assert len(load_dataset("mnist", test_fraction=0.5).test) == 2500


def test_load_labels_matches_the_train_split(mnist):
    labels = load_labels()
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(labels, mnist.train.labels.numpy())


def test_callers_own_their_tensors(mnist):
    first = load_dataset()
    first.train.images.zero_()
    assert torch.equal(load_dataset().train.images, mnist.train.images)


def test_a_normalised_batch_has_roughly_zero_mean_and_unit_std(mnist):
    x, y = next(
        iter_batches(mnist.train, batch_size=512, generator=torch.Generator().manual_seed(0))
    )
    assert x.dtype == torch.float32 and x.shape == (512, 1, 28, 28)
    assert y.dtype == torch.int64
    assert abs(float(x.mean())) < 0.05
    assert float(x.std()) == pytest.approx(1.0, abs=0.05)


def test_normalize_maps_uint8_exactly():
    images = torch.tensor([0, 255], dtype=torch.uint8).view(2, 1, 1, 1)
    out = normalize(images, mean=(0.5,), std=(0.25,))
    assert out.flatten().tolist() == [-2.0, 2.0]
    with pytest.raises(ValueError, match="uint8"):
        normalize(images.float(), mean=(0.5,), std=(0.25,))


def test_iter_batches_covers_indices_once_in_seeded_order(mnist):
    indices = np.arange(10, 110)
    order = [y for _, y in iter_batches(mnist.train, indices, batch_size=32)]
    assert [len(y) for y in order] == [32, 32, 32, 4]
    assert torch.equal(torch.cat(order), mnist.train.labels[10:110])

    def shuffled(seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.cat(
            [
                x.sum(dim=(1, 2, 3))
                for x, _ in iter_batches(mnist.train, indices, batch_size=32, generator=gen)
            ]
        )

    assert torch.equal(shuffled(3), shuffled(3))
    assert not torch.equal(shuffled(3), shuffled(4))
    assert torch.equal(shuffled(3).sort().values, shuffled(4).sort().values)


def test_index_validation(mnist):
    assert as_index(None, 3).tolist() == [0, 1, 2]
    assert as_index([2, 0], 3).tolist() == [2, 0]
    with pytest.raises(IndexError):
        as_index([0, 3], 3)
    with pytest.raises(IndexError):
        list(iter_batches(mnist.train, [-1], batch_size=1))
    with pytest.raises(InvalidArgument, match="batch_size must be an integer >= 1, got 0"):
        list(iter_batches(mnist.train, [0], batch_size=0))


def test_imageset_rejects_wrong_types():
    labels = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(InvalidArgument, match="images must be a uint8 tensor"):
        ImageSet(torch.zeros(2, 1, 4, 4), labels, (0.5,), (0.2,))
    with pytest.raises(InvalidArgument, match=r"labels must be an int64 tensor of shape \(2,\)"):
        ImageSet(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), labels[:1], (0.5,), (0.2,))
    with pytest.raises(
        InvalidArgument, match=r"one value per channel \(1\), got mean \(0.5, 0.5\)"
    ):
        ImageSet(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), labels, (0.5, 0.5), (0.2, 0.2))


def test_stratified_split_rounds_per_class():
    labels = np.array([0] * 10 + [1] * 5)
    train, test = stratified_split(labels, test_fraction=0.2, seed=0)
    assert np.bincount(labels[test]).tolist() == [2, 1]
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(15))
    with pytest.raises(
        InvalidArgument, match=r"test_fraction must be a finite number in \(0, 1\), got 1.0"
    ):
        stratified_split(labels, test_fraction=1.0)
    with pytest.raises(InvalidArgument, match="seed must be an integer >= 0, got -1"):
        stratified_split(labels, seed=-1)


def test_float_indices_are_rejected():
    with pytest.raises(InvalidArgument, match="indices must be integers, got dtype float64"):
        as_index(np.array([0.0, 1.5]), 3)
    assert len(as_index([], 3)) == 0
