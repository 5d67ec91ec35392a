"""Properties of the split schemes: coverage, disjointness, determinism, class counts, sizes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.partitioning import (
    dirichlet,
    heterogeneity,
    iid,
    label_skew,
    partition,
    quantity_skew,
    scheme_parameters,
    shards,
)
from fl_async.validation import InvalidArgument

FAST = settings(max_examples=40, deadline=None)

# Parameters that every scheme accepts on any label array with >= 1 sample per partition.
PARAMS = {
    "iid": {},
    "dirichlet": {"alpha": 0.3},
    "label_skew": {"classes_per_partition": 1},
    "shards": {"shards_per_partition": 1},
    "quantity_skew": {"alpha": 0.5},
}


@st.composite
def label_arrays(draw: st.DrawFn, min_per_class: int = 1) -> np.ndarray:
    """Shuffled labels with 1-6 arbitrary (also negative) class values and uneven class sizes."""
    values = draw(st.lists(st.integers(-5, 300), min_size=1, max_size=6, unique=True))
    sizes = draw(
        st.lists(
            st.integers(min_per_class, min_per_class + 40),
            min_size=len(values),
            max_size=len(values),
        )
    )
    dtype = draw(st.sampled_from([np.int64, np.int32, np.int16]))
    labels = np.repeat(np.array(values, dtype=dtype), sizes)
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(labels)


@st.composite
def splits(draw: st.DrawFn, per_class: bool = False) -> tuple[np.ndarray, int, int]:
    """Labels, a number of partitions and a seed; ``per_class`` caps the partitions at the
    smallest class size, which label_skew needs to give each holder of a class some samples."""
    labels = draw(label_arrays())
    most = np.unique(labels, return_counts=True)[1].min() if per_class else labels.size
    return labels, draw(st.integers(1, most)), draw(st.integers(0, 2**32 - 1))


def assert_exact_cover(parts: list[np.ndarray], num_samples: int) -> None:
    """Every sample in exactly one partition (coverage and disjointness at once)."""
    assert all(part.dtype == np.int64 and part.ndim == 1 for part in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(num_samples))


def num_classes_in(labels: np.ndarray, part: np.ndarray) -> int:
    return np.unique(labels[part]).size


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "quantity_skew"])
@FAST
@given(split=splits())
def test_every_sample_lands_in_exactly_one_partition(
    scheme: str, split: tuple[np.ndarray, int, int]
) -> None:
    labels, num_partitions, seed = split
    parts = partition(labels, scheme, num_partitions, seed, **PARAMS[scheme])
    assert len(parts) == num_partitions
    assert_exact_cover(parts, labels.size)


# natural also takes owner ids: tests/test_partitioning_natural.py holds it to the same rules.
@pytest.mark.parametrize("scheme", list(PARAMS))
@FAST
@given(split=splits(per_class=True))
def test_same_seed_same_split_and_seed_equals_its_generator(
    scheme: str, split: tuple[np.ndarray, int, int]
) -> None:
    labels, num_partitions, seed = split
    first = partition(labels, scheme, num_partitions, seed, **PARAMS[scheme])
    again = partition(labels.tolist(), scheme, num_partitions, seed, **PARAMS[scheme])
    generator = partition(
        labels, scheme, num_partitions, np.random.default_rng(seed), **PARAMS[scheme]
    )
    for a, b, c in zip(first, again, generator, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_different_seeds_give_different_splits() -> None:
    labels = np.repeat(np.arange(10), 100)
    for scheme, params in PARAMS.items():
        a = partition(labels, scheme, 10, 0, **params)
        b = partition(labels, scheme, 10, 1, **params)
        assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)), scheme


@FAST
@given(split=splits())
def test_iid_sizes_differ_by_at_most_one(split: tuple[np.ndarray, int, int]) -> None:
    labels, num_partitions, seed = split
    sizes = [part.size for part in iid(labels, num_partitions, seed)]
    assert max(sizes) - min(sizes) <= 1


def test_iid_of_a_sorted_dataset_is_still_iid() -> None:
    labels = np.repeat(np.arange(10), 1000)  # sorted: contiguous chunks would hold one class each
    report = heterogeneity(labels, iid(labels, 10, 0))
    assert (report.counts > 0).all()
    assert report.hellinger.max() < 0.05


@FAST
@given(data=st.data())
def test_label_skew_gives_exactly_k_classes_and_covers_held_classes(data: st.DataObject) -> None:
    num_partitions = data.draw(st.integers(1, 12))
    # Each class has >= num_partitions samples, so it can feed every partition that holds it.
    labels = data.draw(label_arrays(min_per_class=num_partitions))
    num_classes = np.unique(labels).size
    k = data.draw(st.integers(1, num_classes))
    parts = label_skew(labels, num_partitions, k, data.draw(st.integers(0, 2**32 - 1)))
    assert len(parts) == num_partitions
    assert all(num_classes_in(labels, part) == k for part in parts)
    assigned = np.concatenate(parts)
    assert np.unique(assigned).size == assigned.size  # disjoint
    held = np.unique(labels[assigned])
    if num_partitions * k >= num_classes:
        assert held.size == num_classes
    else:
        assert held.size == num_partitions * k
    # Every sample of a held class is assigned, none of an unheld one.
    np.testing.assert_array_equal(np.sort(assigned), np.flatnonzero(np.isin(labels, held)))


def test_label_skew_splits_each_class_evenly_among_its_holders() -> None:
    labels = np.repeat(np.arange(5), 103)
    parts = label_skew(labels, 20, 2, 3)
    for c in range(5):
        shares = [np.count_nonzero(labels[part] == c) for part in parts]
        held = [s for s in shares if s > 0]
        assert sum(held) == 103
        assert max(held) - min(held) <= 1


def test_label_skew_refuses_a_class_too_small_for_its_holders() -> None:
    labels = np.array([0] * 50 + [1] * 2)
    with pytest.raises(ValueError, match="class 1 has 2 samples for"):
        label_skew(labels, 10, 2, 0)


@FAST
@given(split=splits(), per_partition=st.integers(1, 4))
def test_shards_deal_equal_shards(split: tuple[np.ndarray, int, int], per_partition: int) -> None:
    labels, num_partitions, seed = split
    per_partition = min(per_partition, labels.size // num_partitions)
    parts = shards(labels, num_partitions, per_partition, seed)
    assert_exact_cover(parts, labels.size)
    shard = labels.size // (num_partitions * per_partition)
    sizes = np.array([part.size for part in parts])
    assert sizes.min() >= per_partition * shard
    assert sizes.max() <= per_partition * (shard + 1)


def test_shards_of_class_aligned_shards_hold_at_most_s_classes() -> None:
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 60))
    parts = shards(labels, 10, 2, 0)  # 20 shards of 30: each shard is half of one class
    assert all(num_classes_in(labels, part) <= 2 for part in parts)
    assert max(num_classes_in(labels, part) for part in parts) == 2


@FAST
@given(split=splits(), alpha=st.floats(0.01, 100), data=st.data())
def test_dirichlet_min_partition_size_is_met_or_explained(
    split: tuple[np.ndarray, int, int], alpha: float, data: st.DataObject
) -> None:
    labels, num_partitions, seed = split
    minimum = data.draw(st.integers(0, labels.size // num_partitions))
    try:
        parts = dirichlet(labels, num_partitions, alpha, seed, minimum, max_tries=3)
    except ValueError as error:
        assert "min_partition_size" in str(error) and "max_tries=3" in str(error)
    else:
        assert_exact_cover(parts, labels.size)
        assert min(part.size for part in parts) >= minimum


def test_dirichlet_gives_up_after_max_tries_saying_what_to_change() -> None:
    labels = np.repeat(np.arange(10), 100)
    message = r"min_partition_size=100 .* max_tries=4 .* raise alpha \(got 0.01\) .* \(got 10\)"
    with pytest.raises(ValueError, match=message):
        dirichlet(labels, 10, 0.01, 0, min_partition_size=100, max_tries=4)


def test_dirichlet_resampling_reaches_a_feasible_minimum() -> None:
    labels = np.repeat(np.arange(10), 100)
    parts = dirichlet(labels, 10, 1.0, 0, min_partition_size=40, max_tries=50)
    assert min(part.size for part in parts) >= 40


def mean_hellinger(scheme: str, alpha: float, seeds: range, **params: object) -> float:
    labels = np.repeat(np.arange(10), 300)
    return float(
        np.mean(
            [
                heterogeneity(labels, partition(labels, scheme, 20, s, alpha=alpha, **params)).mean(
                    "hellinger"
                )
                for s in seeds
            ]
        )
    )


@pytest.mark.parametrize("self_balancing", [False, True])
def test_dirichlet_skew_falls_as_alpha_grows(self_balancing: bool) -> None:
    means = [
        mean_hellinger("dirichlet", a, range(5), self_balancing=self_balancing)
        for a in (0.05, 0.3, 1.0, 5.0, 50.0)
    ]
    assert means == sorted(means, reverse=True) and len(set(means)) == len(means)
    assert means[0] > 0.6 and means[-1] < 0.1


def test_dirichlet_survives_a_tiny_alpha() -> None:
    labels = np.repeat(np.arange(10), 100)
    for self_balancing in (False, True):
        parts = dirichlet(labels, 50, 1e-4, 0, self_balancing=self_balancing)
        assert_exact_cover(parts, labels.size)
        # Near one class per non-empty partition.
        assert np.mean([num_classes_in(labels, p) for p in parts if p.size]) < 1.5


def test_quantity_skew_skews_sizes_not_labels() -> None:
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 2000))
    ginis = []
    for alpha in (0.1, 1.0, 100.0):
        report = heterogeneity(labels, quantity_skew(labels, 20, 0, alpha=alpha))
        ginis.append(report.gini)
        big = report.sizes >= 1000
        assert report.hellinger[big].max() < 0.06  # big partitions look like the whole
    assert ginis[0] > ginis[1] > ginis[2] and ginis[2] < 0.05


def test_schemes_leave_global_random_state_alone() -> None:
    # Reading the legacy global state is the point of this test.
    np_state = np.random.get_state()  # noqa: NPY002
    py_state = random.getstate()
    labels = np.repeat(np.arange(10), 100)
    for scheme, params in PARAMS.items():
        partition(labels, scheme, 10, 0, **params)
    after = np.random.get_state()  # noqa: NPY002
    assert all(np.array_equal(a, b) for a, b in zip(np_state, after, strict=True))
    assert random.getstate() == py_state


def test_labels_may_be_a_list_or_a_torch_tensor() -> None:
    labels = np.repeat(np.arange(4), 25)
    expected = dirichlet(labels, 5, 0.5, 7)
    for form in (labels.tolist(), torch.from_numpy(labels), labels.astype(np.uint8)):
        for a, b in zip(dirichlet(form, 5, 0.5, 7), expected, strict=True):
            np.testing.assert_array_equal(a, b)


def test_partition_accepts_hyphenated_names_and_lists_the_choices() -> None:
    labels = np.repeat(np.arange(4), 25)
    a = partition(labels, "label-skew", 4, 0, classes_per_partition=2)
    b = label_skew(labels, 4, 2, 0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(
        InvalidArgument, match="unknown scheme 'pathological'; allowed: iid, dirichlet"
    ):
        partition(labels, "pathological", 4, 0)
    with pytest.raises(InvalidArgument, match=r"'iid' got unknown parameter\(s\) \['alpha'\]"):
        partition(labels, "iid", 4, 0, alpha=0.1)
    with pytest.raises(InvalidArgument, match=r"'dirichlet' needs parameter\(s\) \['alpha'\]"):
        partition(labels, "dirichlet", 4, 0)
    assert list(scheme_parameters("shards")) == ["shards_per_partition"]


LABELS = np.repeat(np.arange(5), 4)  # 20 samples, 5 classes


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: iid(np.zeros((4, 5), dtype=int), 2, 0), r"1-D array, got shape \(4, 5\)"),
        (lambda: iid([0.0, 1.0, 2.0], 2, 0), "integers, got dtype float64"),
        (lambda: iid([True, False], 2, 0), "integers, got dtype bool"),
        (lambda: iid(["a", "b"], 2, 0), "integers, got dtype <U1"),
        (lambda: iid([], 1, 0), "at least one sample"),
        (
            lambda: iid(LABELS, 0, 0),
            r"num_partitions must be an integer in \[1, 20\], got 0; 20 is the number of samples",
        ),
        (lambda: iid(LABELS, 21, 0), r"num_partitions must be an integer in \[1, 20\], got 21"),
        (lambda: iid(LABELS, 2.5, 0), r"num_partitions must be an integer in \[1, 20\], got 2.5"),
        (lambda: iid(LABELS, True, 0), r"num_partitions must be an integer .*, got True"),
        (
            lambda: iid(LABELS, 2, None),
            "seed must be an integer >= 0 or a numpy.random.Generator, got None",
        ),
        (lambda: iid(LABELS, 2, -1), "seed must be an integer >= 0 or a .*, got -1"),
        (lambda: iid(LABELS, 2, 1.5), "seed must be an integer >= 0 or a .*, got 1.5"),
        (lambda: dirichlet(LABELS, 2, -1, 0), "alpha must be a finite number > 0, got -1"),
        (lambda: dirichlet(LABELS, 2, 0, 0), "alpha must be a finite number > 0, got 0"),
        (lambda: dirichlet(LABELS, 2, float("nan"), 0), "alpha .* got nan"),
        (lambda: dirichlet(LABELS, 2, float("inf"), 0), "alpha .* got inf"),
        (lambda: dirichlet(LABELS, 2, "0.5", 0), "alpha must be a finite number > 0, got '0.5'"),
        (
            lambda: dirichlet(LABELS, 2, 0.5, 0, -1),
            r"min_partition_size must be an integer in \[0, 10\], got -1; 10 is the number of "
            "samples // num_partitions",
        ),
        (
            lambda: dirichlet(LABELS, 2, 0.5, 0, 11),
            r"min_partition_size must be an integer in \[0, 10\], got 11",
        ),
        (lambda: dirichlet(LABELS, 2, 0.5, 0, max_tries=0), "max_tries must be an integer >= 1"),
        (
            lambda: dirichlet(LABELS, 2, 0.5, 0, self_balancing="yes"),
            "self_balancing must be True or False, got 'yes'",
        ),
        (
            lambda: label_skew(LABELS, 2, 0, 0),
            r"classes_per_partition must be an integer in \[1, 5\], got 0; 5 is the number of "
            "classes",
        ),
        (
            lambda: label_skew(LABELS, 2, 6, 0),
            r"classes_per_partition must be an integer in \[1, 5\], got 6",
        ),
        (
            lambda: shards(LABELS, 4, 0, 0),
            r"shards_per_partition must be an integer in \[1, 5\], got 0; 5 is the number of "
            "samples // num_partitions",
        ),
        (
            lambda: shards(LABELS, 4, 6, 0),
            r"shards_per_partition must be an integer in \[1, 5\], got 6",
        ),
        (lambda: quantity_skew(LABELS, 2, 0, alpha=-0.5), "alpha must be .* > 0, got -0.5"),
        (lambda: partition(LABELS, 3, 2, 0), "unknown scheme 3; allowed: iid, dirichlet"),
    ],
)
def test_bad_input_names_the_value_and_what_is_allowed(call, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        call()
