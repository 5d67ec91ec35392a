"""Models by name, seeded initialisation, and weights to and from numpy (buffers included)."""

import numpy as np
import pytest
import torch

from fl_async.models import (
    CNN,
    CNN32,
    MODEL_NAMES,
    LogReg,
    ResNet8,
    build_model,
    get_weights,
    set_weights,
)
from fl_async.validation import InvalidArgument


@pytest.mark.parametrize(
    ("name", "channels", "size", "expected"),
    [
        ("cnn", 1, 28, CNN),
        ("cnn32", 3, 32, CNN32),
        ("resnet8", 3, 32, ResNet8),
        ("resnet8", 1, 28, ResNet8),
        ("cnn", 3, 32, CNN),
        ("auto", 1, 28, CNN),
        ("auto", 3, 32, CNN32),
    ],
)
def test_output_shapes(name, channels, size, expected):
    model = build_model(name, num_classes=7, in_channels=channels, image_size=size)
    assert isinstance(model, expected)
    assert model(torch.zeros(3, channels, size, size)).shape == (3, 7)


def test_unknown_model_lists_the_allowed_names():
    with pytest.raises(InvalidArgument, match="model must be one of .*, got 'vgg'") as error:
        build_model("vgg", num_classes=10, in_channels=1, image_size=28)
    assert all(name in str(error.value) for name in MODEL_NAMES)
    with pytest.raises(
        InvalidArgument, match="image_size for cnn32 must be an integer >= 8, got 4"
    ):
        build_model("cnn32", num_classes=10, in_channels=3, image_size=4)
    with pytest.raises(InvalidArgument, match="num_classes must be an integer >= 1, got True"):
        build_model("cnn", num_classes=True, in_channels=1, image_size=28)


def test_seeded_models_are_identical_and_leave_the_global_stream_alone():
    state = torch.random.get_rng_state()
    first = get_weights(build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=3))
    again = get_weights(build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=3))
    other = get_weights(build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=4))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_weights_round_trip_carries_batchnorm_buffers():
    source = build_model("resnet8", num_classes=10, in_channels=3, image_size=16, seed=0)
    source.train()
    source(torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 3 + 1)
    arrays = get_weights(source)
    keys = list(source.state_dict())
    assert len(arrays) == len(keys)
    tracked = arrays[keys.index("stem.1.num_batches_tracked")]
    assert tracked.dtype == np.int64 and int(tracked) == 1
    assert not np.allclose(arrays[keys.index("stem.1.running_mean")], 0)

    target = build_model("resnet8", num_classes=10, in_channels=3, image_size=16, seed=1)
    set_weights(target, arrays)
    for key, value in target.state_dict().items():
        assert torch.equal(value, source.state_dict()[key]), key
    assert target.state_dict()["stem.1.num_batches_tracked"].dtype == torch.int64
    source.eval(), target.eval()
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(source(x), target(x))


def test_get_weights_returns_copies():
    model = build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=0)
    arrays = get_weights(model)
    arrays[0] += 1
    assert not np.array_equal(get_weights(model)[0], arrays[0])


def test_set_weights_accepts_read_only_float64_arrays():
    model = build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=0)
    arrays = [a.astype(np.float64) for a in get_weights(model)]
    for array in arrays:
        array.flags.writeable = False
    set_weights(model, arrays)
    assert next(model.parameters()).dtype == torch.float32


def test_set_weights_rejects_wrong_shapes_and_counts():
    model = build_model("cnn", num_classes=10, in_channels=1, image_size=28)
    arrays = get_weights(model)
    wrong = arrays[:1] + [np.zeros((3, 3), dtype=np.float32)] + arrays[2:]
    with pytest.raises(
        InvalidArgument, match=r"features\.0\.bias: the model expects shape \(16,\)"
    ):
        set_weights(model, wrong)
    with pytest.raises(InvalidArgument, match="got 7 arrays"):
        set_weights(model, arrays[:7])
    other = build_model("cnn", num_classes=5, in_channels=1, image_size=28)
    with pytest.raises(InvalidArgument, match="classifier"):
        set_weights(other, arrays)


def test_logreg_is_one_linear_layer_on_features_or_flattened_images():
    model = build_model("auto", num_classes=10, num_features=60, seed=0)
    assert isinstance(model, LogReg)
    assert sum(p.numel() for p in model.parameters()) == 610  # FedProx's 60 x 10 + 10
    assert model(torch.zeros(4, 60)).shape == (4, 10)
    weight, bias = (p.detach() for p in model.parameters())
    x = torch.randn(3, 60, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(x), x @ weight.T + bias)
    on_images = build_model("logreg", num_classes=7, in_channels=1, image_size=28)
    assert on_images(torch.zeros(2, 1, 28, 28)).shape == (2, 7)
    assert sum(p.numel() for p in on_images.parameters()) == 784 * 7 + 7


def test_feature_vectors_refuse_image_models_and_need_one_kind_of_shape():
    with pytest.raises(InvalidArgument, match="model 'cnn' needs images; feature vectors"):
        build_model("cnn", num_classes=10, num_features=60)
    with pytest.raises(InvalidArgument, match="give in_channels and image_size .* or num_features"):
        build_model("logreg", num_classes=10, in_channels=1, image_size=28, num_features=60)
    with pytest.raises(InvalidArgument, match="give in_channels and image_size"):
        build_model("auto", num_classes=10)
    with pytest.raises(InvalidArgument, match="num_features must be an integer >= 1, got 0"):
        build_model("logreg", num_classes=10, num_features=0)
