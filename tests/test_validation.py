"""fl_async.validation: what each check accepts and refuses, and that every layer uses it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fl_async.bench.metrics import sigma_acc
from fl_async.data import ImageSet, iter_batches, load_dataset, stratified_split
from fl_async.models import build_model
from fl_async.partitioning import heterogeneity, iid, load_partition
from fl_async.scheduling import TaskQueue, VirtualClock, ranking_by_classes
from fl_async.validation import (
    InvalidArgument,
    check_choice,
    check_int,
    check_number,
    check_seed,
)


def test_invalid_argument_is_both_a_value_error_and_a_type_error() -> None:
    assert issubclass(InvalidArgument, ValueError) and issubclass(InvalidArgument, TypeError)
    for caught in (ValueError, TypeError):
        with pytest.raises(caught):
            check_int("n", "3")
        with pytest.raises(caught):
            check_int("n", -1, minimum=0)


# ------------------------------------------------------------------------------- check_int
@pytest.mark.parametrize("value", [0, 7, np.int64(7), np.int32(7), np.uint8(7)])
def test_check_int_accepts_python_and_numpy_integers_as_int(value: Any) -> None:
    checked = check_int("n", value, minimum=0)
    assert type(checked) is int and checked == int(value)


@pytest.mark.parametrize(
    "value", [True, False, np.bool_(True), 1.0, np.float64(2.0), "1", None, [1]]
)
def test_check_int_refuses_bools_floats_and_other_types(value: Any) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(f"n must be an integer, got {value!r}")):
        check_int("n", value)


def test_check_int_bounds_are_closed() -> None:
    assert check_int("n", 1, minimum=1, maximum=3) == 1
    assert check_int("n", 3, minimum=1, maximum=3) == 3
    with pytest.raises(InvalidArgument, match=re.escape("n must be an integer in [1, 3], got 0")):
        check_int("n", 0, minimum=1, maximum=3)
    with pytest.raises(InvalidArgument, match=re.escape("n must be an integer in [1, 3], got 4")):
        check_int("n", 4, minimum=1, maximum=3)
    with pytest.raises(InvalidArgument, match="n must be an integer >= 0, got -1"):
        check_int("n", -1, minimum=0)
    with pytest.raises(InvalidArgument, match="n must be an integer <= 3, got 4"):
        check_int("n", 4, maximum=3)


def test_check_int_allows_none_only_when_asked() -> None:
    assert check_int("n", None, minimum=0, allow_none=True) is None
    with pytest.raises(InvalidArgument, match="n must be an integer >= 0 or None, got -1"):
        check_int("n", -1, minimum=0, allow_none=True)
    with pytest.raises(InvalidArgument, match="n must be an integer >= 0, got None"):
        check_int("n", None, minimum=0)


# ---------------------------------------------------------------------------- check_number
@pytest.mark.parametrize("value", [0, 2, 0.5, np.int64(2), np.float32(0.25), np.float64(0.5)])
def test_check_number_accepts_python_and_numpy_reals_as_float(value: Any) -> None:
    checked = check_number("x", value, minimum=0)
    assert type(checked) is float and checked == float(value)


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.5", None, 1j, [0.5]])
def test_check_number_refuses_bools_and_other_types(value: Any) -> None:
    message = f"x must be a finite number, got {value!r}"
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        check_number("x", value)


def test_check_number_refuses_nan_always_and_inf_unless_not_finite() -> None:
    with pytest.raises(InvalidArgument, match="x must be a finite number, got nan"):
        check_number("x", math.nan)
    with pytest.raises(InvalidArgument, match=re.escape("x must be a number (inf allowed)")):
        check_number("x", np.float64("nan"), finite=False)
    with pytest.raises(InvalidArgument, match="x must be a finite number >= 0, got inf"):
        check_number("x", math.inf, minimum=0)
    assert check_number("x", math.inf, minimum=0, finite=False) == math.inf
    with pytest.raises(InvalidArgument, match=re.escape("(inf allowed) <= 1, got inf")):
        check_number("x", math.inf, maximum=1, finite=False)


@pytest.mark.parametrize(
    ("min_open", "max_open", "interval"),
    [
        (False, False, "[0, 1]"),
        (True, False, "(0, 1]"),
        (False, True, "[0, 1)"),
        (True, True, "(0, 1)"),
    ],
)
def test_check_number_bounds_open_or_closed(min_open: bool, max_open: bool, interval: str) -> None:
    def check(value: float) -> float:
        return check_number("x", value, minimum=0, maximum=1, min_open=min_open, max_open=max_open)

    assert check(0.5) == 0.5
    for edge, is_open in ((0, min_open), (1, max_open)):
        if is_open:
            message = f"x must be a finite number in {interval}, got {edge}"
            with pytest.raises(InvalidArgument, match=re.escape(message)):
                check(edge)
        else:
            assert check(edge) == edge
    for outside in (-0.1, 1.1):
        with pytest.raises(InvalidArgument, match=re.escape(f"got {outside}")):
            check(outside)


def test_check_number_single_open_bounds_read_as_strict_inequalities() -> None:
    with pytest.raises(InvalidArgument, match="x must be a finite number > 0, got 0"):
        check_number("x", 0, minimum=0, min_open=True)
    with pytest.raises(InvalidArgument, match="x must be a finite number < 1, got 1.0"):
        check_number("x", 1.0, maximum=1, max_open=True)


def test_check_number_allows_none_only_when_asked() -> None:
    assert check_number("x", None, minimum=0, allow_none=True) is None
    with pytest.raises(InvalidArgument, match="x must be a finite number >= 0, got None"):
        check_number("x", None, minimum=0)
    with pytest.raises(InvalidArgument, match="x must be a finite number >= 0 or None, got -1"):
        check_number("x", -1, minimum=0, allow_none=True)


# ---------------------------------------------------------------------- check_choice, seed
def test_check_choice_accepts_members_of_any_iterable() -> None:
    assert check_choice("mode", "b", ("a", "b")) == "b"
    assert check_choice("mode", "a", {"a": 1, "b": 2}) == "a"  # a dict's keys
    assert check_choice("mode", "a", (c for c in "ab")) == "a"


@pytest.mark.parametrize("value", ["c", "A", "", None, 1, True])
def test_check_choice_refuses_others_listing_the_choices(value: Any) -> None:
    message = f"mode must be one of 'a', 'b', '1', got {value!r}"
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        check_choice("mode", value, ["a", "b", "1"])


def test_check_seed_is_an_integer_at_least_zero() -> None:
    assert check_seed("seed", 0) == 0 and check_seed("seed", np.int64(5)) == 5
    for bad in (-1, True, None, 1.5, "0"):
        with pytest.raises(
            InvalidArgument, match=re.escape(f"seed must be an integer >= 0, got {bad!r}")
        ):
            check_seed("seed", bad)


# ------------------------------------------------------------------- one check, every layer
LABELS = np.repeat(np.arange(4), 5)
MODEL = {"num_classes": 10, "in_channels": 1, "image_size": 28}
IMAGES = ImageSet(
    torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64), (0.5,), (0.2,)
)

# (layer, call, how the message names the bad value): the same four mistakes in every layer.
MISTAKES: list[tuple[str, Callable[[], Any], str]] = [
    # a bool where a count is expected
    ("scheduling", lambda: TaskQueue().push("t", 1.0, True), "got True"),
    ("partitioning", lambda: iid(LABELS, True, 0), "got True"),
    ("data", lambda: list(iter_batches(IMAGES, batch_size=True)), "got True"),
    ("models", lambda: build_model("cnn", **{**MODEL, "num_classes": True}), "got True"),
    # a negative count or seed
    ("scheduling", lambda: VirtualClock(seed=-3), "got -3"),
    ("partitioning", lambda: load_partition(LABELS, -3, 4, "iid", 0), "got -3"),
    ("data", lambda: stratified_split(LABELS, seed=-3), "got -3"),
    ("models", lambda: build_model("cnn", **MODEL, seed=-3), "got -3"),
    # an unknown choice
    ("scheduling", lambda: ranking_by_classes([[1, 2]], fast="fastest"), "got 'fastest'"),
    ("partitioning", lambda: heterogeneity(LABELS, [LABELS]).mean("kl"), "got 'kl'"),
    ("data", lambda: load_dataset("mnist", source="tfds"), "got 'tfds'"),
    ("models", lambda: build_model("vgg", **MODEL), "got 'vgg'"),
    # a number out of range, or mismatched lengths
    ("scheduling", lambda: VirtualClock(jitter=-0.5), "got -0.5"),
    ("partitioning", lambda: iid(LABELS, 2, 1.5), "got 1.5"),
    ("data", lambda: stratified_split(LABELS, test_fraction=1.5), "got 1.5"),
    ("bench", lambda: sigma_acc([0.0, 1.0], [0.5]), "got 2 times and 1 accuracies"),
]


@pytest.mark.parametrize(("layer", "call", "named"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_layer_raises_invalid_argument_naming_the_value(
    layer: str, call: Callable[[], Any], named: str
) -> None:
    with pytest.raises(InvalidArgument) as error:
        call()
    assert named in str(error.value), (layer, str(error.value))
