"""``build_model``: a model chosen by name for a dataset's shape, optionally seeded."""

from __future__ import annotations

import threading

import torch
from torch import nn

from fl_async.models.cnn import CNN, CNN32
from fl_async.models.logreg import LogReg
from fl_async.models.resnet import ResNet8
from fl_async.validation import InvalidArgument, check_choice, check_int

_SEEDED = threading.Lock()
"""Held while a seeded model draws its initial weights from torch's global generator."""

MODEL_NAMES: tuple[str, ...] = ("auto", "cnn", "cnn32", "resnet8", "logreg")
# The smallest image each model accepts: one pixel must survive its pooling.
_MIN_SIZE = {"cnn": 4, "cnn32": 8, "resnet8": 1, "logreg": 1}


def build_model(
    name: str = "auto",
    *,
    num_classes: int,
    in_channels: int | None = None,
    image_size: int | None = None,
    num_features: int | None = None,
    seed: int | None = None,
) -> nn.Module:
    """A fresh model for images (``in_channels``, ``image_size``) or feature vectors
    (``num_features``): ``cnn``, ``cnn32``, ``resnet8``, ``logreg`` (any input, flattened), or
    ``auto`` (``logreg`` for feature vectors, ``cnn`` up to 28 pixels, ``cnn32`` above). With
    ``seed``, the initial weights depend on it alone."""
    check_choice("model", name, MODEL_NAMES)
    num_classes = check_int("num_classes", num_classes, minimum=1)
    seed = check_int("seed", seed, minimum=0, allow_none=True)
    images = in_channels is not None or image_size is not None
    if images == (num_features is not None):
        raise InvalidArgument(
            "give in_channels and image_size (images) or num_features (feature vectors), got "
            f"in_channels={in_channels}, image_size={image_size}, num_features={num_features}"
        )
    if images:
        in_channels = check_int("in_channels", in_channels, minimum=1)
        image_size = check_int("image_size", image_size, minimum=1)
        if name == "auto":
            name = "cnn" if image_size <= 28 else "cnn32"
        check_int(f"image_size for {name}", image_size, minimum=_MIN_SIZE[name])
        num_features = in_channels * image_size * image_size
    else:
        num_features = check_int("num_features", num_features, minimum=1)
        if name == "auto":
            name = "logreg"
        if name != "logreg":
            raise InvalidArgument(
                f"model {name!r} needs images; feature vectors ({num_features} features) take "
                "'logreg' or 'auto'"
            )
    if seed is None:
        return _construct(name, num_classes, in_channels, image_size, num_features)
    # torch.nn initialises from the global generator; fork_rng restores its state afterwards, so
    # seeding here leaves the caller's random stream untouched. The lock: that generator is the
    # process's, and two threads seeding it at once (a study's runs) would mix their draws.
    with _SEEDED, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _construct(name, num_classes, in_channels, image_size, num_features)


def _construct(
    name: str, num_classes: int, in_channels: int | None, image_size: int | None, num_features: int
) -> nn.Module:
    if name == "logreg":
        return LogReg(num_features=num_features, num_classes=num_classes)
    if name == "cnn":
        return CNN(num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    if name == "cnn32":
        return CNN32(num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    return ResNet8(num_classes=num_classes, in_channels=in_channels)
