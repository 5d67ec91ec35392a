"""The natural scheme: every owner (a writer, a device) wholly in one partition; its adapters."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from flwr_datasets import FederatedDataset
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.partitioning import (
    SCHEMES,
    NaturalPartitioner,
    SchemePartitioner,
    cached_split,
    heterogeneity,
    load_partition,
    natural,
    natural_assignment,
    owners_of,
    partition,
    plot_partitions,
    scheme_parameters,
)
from fl_async.validation import InvalidArgument

FAST = settings(max_examples=40, deadline=None)


@st.composite
def owned_samples(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Labels, owner ids (ints or strings, uneven counts per owner), partitions and a seed."""
    num_owners = draw(st.integers(1, 30))
    counts = draw(st.lists(st.integers(1, 12), min_size=num_owners, max_size=num_owners))
    ids = st.integers(-50, 10**6)
    values = draw(st.lists(ids, min_size=num_owners, max_size=num_owners, unique=True))
    owners = np.repeat(np.array(values), counts)
    if draw(st.booleans()):
        owners = np.array([f"writer-{value}" for value in owners])
    order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(owners.size)
    labels = np.arange(owners.size) % 7
    seed = draw(st.integers(0, 2**32 - 1))
    return labels, owners[order], draw(st.integers(1, num_owners)), seed


def owners_in(owners: np.ndarray, parts: list[np.ndarray]) -> list[set]:
    return [set(owners[part].tolist()) for part in parts]


@FAST
@given(case=owned_samples())
def test_every_sample_once_and_every_owner_in_one_partition(case) -> None:
    labels, owners, num_partitions, seed = case
    parts = natural(labels, num_partitions, owners, seed)
    assert len(parts) == num_partitions
    assert all(part.dtype == np.int64 and part.ndim == 1 for part in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(labels.size))
    held = owners_in(owners, parts)
    assert sum(len(h) for h in held) == np.unique(owners).size  # no owner in two partitions
    counts = [len(h) for h in held]
    assert max(counts) - min(counts) <= 1  # dealt round-robin
    assignment = natural_assignment(owners, num_partitions, seed)
    assert [set(ids.tolist()) for ids in assignment.values()] == held


def test_one_owner_per_partition_when_the_numbers_are_equal() -> None:
    owners = np.repeat([10, 20, 30, 40], [5, 1, 3, 8])
    parts = natural(np.zeros(owners.size, dtype=int), 4, owners, seed=3)
    held = owners_in(owners, parts)
    assert all(len(h) == 1 for h in held)
    assert set().union(*held) == {10, 20, 30, 40}
    # Which owner lands where is the seeded deal; the sizes follow the owners' sizes.
    assert sorted(part.size for part in parts) == [1, 3, 5, 8]


def test_more_owners_than_partitions_follows_the_stated_rule() -> None:
    owners = np.array(["b", "a", "c", "e", "d", "b", "a"])
    rng = np.random.default_rng(5)
    order = rng.permutation(5)  # over the sorted ids a, b, c, d, e
    expected = {p: sorted("abcde"[code] for code in order[p::2]) for p in range(2)}
    assignment = natural_assignment(owners, 2, 5)
    assert {p: ids.tolist() for p, ids in assignment.items()} == expected
    parts = natural(np.zeros(7, dtype=int), 2, owners, 5)
    assert [sorted(set(owners[part])) for part in parts] == [expected[0], expected[1]]


@FAST
@given(case=owned_samples())
def test_same_seed_same_split_and_seed_equals_its_generator(case) -> None:
    labels, owners, num_partitions, seed = case
    first = natural(labels, num_partitions, owners, seed)
    again = partition(labels.tolist(), "natural", num_partitions, seed, owners=owners.tolist())
    generator = natural(labels, num_partitions, owners, np.random.default_rng(seed))
    for a, b, c in zip(first, again, generator, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_different_seeds_deal_owners_differently() -> None:
    owners = np.repeat(np.arange(40), 3)
    labels = np.zeros(owners.size, dtype=int)
    a = owners_in(owners, natural(labels, 8, owners, 0))
    b = owners_in(owners, natural(labels, 8, owners, 1))
    assert a != b


def test_string_and_integer_owners_of_the_same_order_split_alike() -> None:
    codes = np.random.default_rng(0).integers(0, 9, 200)
    names = np.array([f"w{code}" for code in codes])  # w0 < w1 < ... < w8, as the codes
    tensor = torch.from_numpy(codes)
    labels = codes % 3
    for a, b, c in zip(
        natural(labels, 4, codes, 2),
        natural(labels, 4, names, 2),
        natural(labels, 4, tensor, 2),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    objects = names.astype(object)  # what Arrow hands over for a string column
    np.testing.assert_array_equal(
        natural(labels, 4, objects, 2)[0], natural(labels, 4, names, 2)[0]
    )


def test_bad_owners_and_partition_counts_are_refused() -> None:
    labels = np.zeros(6, dtype=int)
    owners = np.array([1, 1, 2, 2, 3, 3])
    with pytest.raises(
        InvalidArgument,
        match=r"num_partitions must be an integer in \[1, 3\], got 5; 3 is the number of "
        "distinct owners",
    ):
        natural(labels, 5, owners, 0)
    with pytest.raises(InvalidArgument, match=r"one id per sample \(6\), got shape \(5,\)"):
        natural(labels, 2, owners[:5], 0)
    with pytest.raises(
        InvalidArgument, match="owners must be integers or strings, got dtype float"
    ):
        natural(labels, 2, owners.astype(float), 0)
    with pytest.raises(InvalidArgument, match="got dtype bool"):
        natural(labels, 2, owners > 1, 0)
    with pytest.raises(InvalidArgument, match="got dtype object"):
        natural(labels, 2, np.array(["a", None, "b", "b", "a", "a"], dtype=object), 0)
    with pytest.raises(InvalidArgument, match="got an empty array"):
        natural_assignment([], 1, 0)
    with pytest.raises(InvalidArgument, match="must be an int here"):
        natural_assignment(owners, 2, np.random.default_rng(0))
    with pytest.raises(
        InvalidArgument, match=r"scheme 'natural' needs parameter\(s\) \['owners'\]"
    ):
        partition(labels, "natural", 2, 0)
    assert list(scheme_parameters("natural")) == ["owners"]


def test_the_label_schemes_tests_cover_every_scheme_but_natural() -> None:
    from test_partitioning_schemes import PARAMS

    assert set(SCHEMES) == {*PARAMS, "natural"}


def test_metrics_and_plots_work_on_a_natural_split(tmp_path) -> None:
    # Each writer writes mostly its own few characters, as in FEMNIST.
    rng = np.random.default_rng(0)
    owners = np.repeat(np.arange(12), 50)
    labels = (owners * 3 + rng.integers(0, 3, owners.size)) % 10
    parts = natural(labels, 4, owners, 0)
    report = heterogeneity(labels, parts)
    assert report.sizes.tolist() == [150] * 4 and report.num_samples == 600
    assert report.counts.sum() == 600 and report.mean("hellinger") > 0.2
    figure = plot_partitions(labels, parts, tmp_path / "natural.png")
    assert len(figure.axes) >= 2
    assert (tmp_path / "natural.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cached_split_and_load_partition_key_on_the_owners() -> None:
    labels = np.zeros(60, dtype=int)
    owners = np.repeat(np.arange(10), 6)
    first = cached_split(labels, "natural", 5, 1, owners=owners)
    assert cached_split(labels, "natural", 5, 1, owners=owners.copy())[0] is first[0]
    others = cached_split(labels, "natural", 5, 1, owners=owners[::-1].copy())
    assert others[0] is not first[0]
    names = np.array([f"w{o}" for o in owners], dtype=object)
    assert cached_split(labels, "natural", 5, 1, owners=names)[0] is not first[0]
    np.testing.assert_array_equal(
        load_partition(labels, 3, 5, "natural", 1, owners=owners), natural(labels, 5, owners, 1)[3]
    )


def writers_dataset() -> datasets.Dataset:
    writers = np.repeat([f"f{i:04d}_00" for i in range(9)], 4)
    return datasets.Dataset.from_dict(
        {"writer_id": writers, "character": np.arange(writers.size) % 62, "x": np.arange(36)}
    )


def test_natural_partitioner_keeps_each_writer_together() -> None:
    dataset = writers_dataset()
    partitioner = NaturalPartitioner(3, seed=4)
    partitioner.dataset = dataset
    owners = owners_of(dataset)
    assert owners.tolist() == dataset["writer_id"]
    expected = natural(np.zeros(36, dtype=int), 3, owners, 4)
    assignment = partitioner.partition_id_to_natural_ids
    for i in range(3):
        loaded = partitioner.load_partition(i)
        assert loaded["x"][:] == expected[i].tolist()
        assert sorted(set(loaded["writer_id"])) == assignment[i].tolist()
        assert len(assignment[i]) == 3
    generic = SchemePartitioner("natural", 3, partition_by="character", seed=4, owners=owners)
    generic.dataset = dataset
    assert generic.load_partition(2)["x"][:] == expected[2].tolist()


def test_natural_partitioner_inside_federated_dataset(tmp_path) -> None:
    writers_dataset().to_parquet(tmp_path / "train.parquet")
    partitioner = NaturalPartitioner(9, "writer_id", seed=0)
    fds = FederatedDataset(
        dataset="parquet",
        data_files={"train": str(tmp_path / "train.parquet")},
        partitioners={"train": partitioner},
        shuffle=False,
        cache_dir=str(tmp_path / "cache"),
    )
    writers = [set(fds.load_partition(i)["writer_id"]) for i in range(9)]
    assert all(len(w) == 1 for w in writers) and len(set().union(*writers)) == 9


def test_owners_of_explains_what_is_wrong() -> None:
    with pytest.raises(InvalidArgument, match="owner_column must be one of"):
        owners_of(writers_dataset(), owner_column="user")
    with pytest.raises(InvalidArgument, match="reads a datasets.Dataset's owner column"):
        owners_of(np.arange(3))
    missing = datasets.Dataset.from_dict({"writer_id": ["a", None, "b"]})
    with pytest.raises(InvalidArgument, match="'writer_id' has 1 missing values"):
        owners_of(missing)
