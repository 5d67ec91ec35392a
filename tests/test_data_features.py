"""Feature vectors: FeatureSet's checks, batches fed as they are, and training a model on them."""

import pytest
import torch

from fl_async.clients import evaluate, train
from fl_async.data import FeatureSet, FederatedData, iter_batches
from fl_async.models import build_model
from fl_async.validation import InvalidArgument


def separable(n=400, seed=0):
    """Two classes split by the sign of the first feature, with a margin."""
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(seed))
    x[:, 0] += torch.where(x[:, 0] >= 0, 1.0, -1.0)
    return FeatureSet(x, (x[:, 0] > 0).to(torch.int64))


def test_feature_set_checks_dtypes_and_shapes():
    with pytest.raises(InvalidArgument, match="features must be a float32 tensor N×D"):
        FeatureSet(torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(InvalidArgument, match=r"labels must be an int64 tensor of shape \(3,\)"):
        FeatureSet(torch.zeros(3, 2), torch.zeros(4, dtype=torch.int64))
    data = separable(10)
    assert len(data) == 10 and data.input_shape == (5,)


def test_batches_carry_the_features_unchanged():
    data = separable(10)
    x, y = next(iter_batches(data, [3, 1, 4], batch_size=8))
    assert torch.equal(x, data.features[[3, 1, 4]]) and torch.equal(y, data.labels[[3, 1, 4]])


def test_logreg_learns_separable_features():
    data = separable()
    model = build_model("auto", num_classes=2, num_features=5, seed=0)
    metrics = train(model, data, range(300), epochs=5, lr=0.5, seed=1)
    assert metrics["num-examples"] == 300 and metrics["steps"] == 5 * 10
    assert evaluate(model, data, range(300, 400))["accuracy"] >= 0.97


def test_feature_data_has_an_input_shape_but_no_image_statistics():
    data = FederatedData("vectors", train=separable(8), test=separable(4, seed=1), num_classes=2)
    assert data.input_shape == (5,)
    with pytest.raises(InvalidArgument, match="vectors holds feature vectors of shape"):
        _ = data.image_shape
    with pytest.raises(InvalidArgument, match="no image shape or channel statistics"):
        _ = data.mean
