"""``build_model``: a model chosen by name for a dataset's shape, optionally seeded."""

from __future__ import annotations

import torch
from torch import nn

from fl_async.models.cnn import CNN, CNN32
from fl_async.models.resnet import ResNet8
from fl_async.validation import check_choice, check_int

MODEL_NAMES: tuple[str, ...] = ("auto", "cnn", "cnn32", "resnet8")
# The smallest image each model accepts: one pixel must survive its pooling.
_MIN_SIZE = {"cnn": 4, "cnn32": 8, "resnet8": 1}


def build_model(
    name: str = "auto",
    *,
    num_classes: int,
    in_channels: int,
    image_size: int,
    seed: int | None = None,
) -> nn.Module:
    """A fresh model: ``cnn``, ``cnn32``, ``resnet8``, or ``auto`` (``cnn`` up to 28 pixels,
    ``cnn32`` above). With ``seed``, the initial weights depend on it alone."""
    check_choice("model", name, MODEL_NAMES)
    num_classes = check_int("num_classes", num_classes, minimum=1)
    in_channels = check_int("in_channels", in_channels, minimum=1)
    image_size = check_int("image_size", image_size, minimum=1)
    seed = check_int("seed", seed, minimum=0, allow_none=True)
    if name == "auto":
        name = "cnn" if image_size <= 28 else "cnn32"
    check_int(f"image_size for {name}", image_size, minimum=_MIN_SIZE[name])
    if seed is None:
        return _construct(name, num_classes, in_channels, image_size)
    # torch.nn initialises from the global generator; fork_rng restores its state afterwards, so
    # seeding here leaves the caller's random stream untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _construct(name, num_classes, in_channels, image_size)


def _construct(name: str, num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    if name == "cnn":
        return CNN(num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    if name == "cnn32":
        return CNN32(num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    return ResNet8(num_classes=num_classes, in_channels=in_channels)
