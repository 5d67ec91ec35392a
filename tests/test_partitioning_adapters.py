"""Adapters: torch and Hugging Face labels, load_partition, the flwr-datasets partitioners."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner as FlowerDirichletPartitioner
from torch.utils.data import Dataset, Subset, TensorDataset

from fl_async.partitioning import (
    DirichletPartitioner,
    IidPartitioner,
    LabelSkewPartitioner,
    QuantitySkewPartitioner,
    SchemePartitioner,
    ShardsPartitioner,
    cached_split,
    dirichlet,
    heterogeneity,
    labels_of,
    load_partition,
    partition,
)
from fl_async.validation import InvalidArgument

LABELS = np.repeat(np.arange(10), 30)  # 300 samples, 10 classes


class Digits(Dataset):
    """A torchvision-style dataset: samples and a ``targets`` tensor."""

    def __init__(self, targets: torch.Tensor) -> None:
        self.targets = targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, int(self.targets[index])


def hf_dataset(labels: np.ndarray = LABELS) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"label": labels, "x": np.arange(labels.size)})


def test_labels_of_reads_torch_hf_and_plain_labels() -> None:
    np.testing.assert_array_equal(labels_of(Digits(torch.from_numpy(LABELS))), LABELS)
    subset = Subset(Digits(torch.from_numpy(LABELS)), [5, 40, 299])
    np.testing.assert_array_equal(labels_of(subset), LABELS[[5, 40, 299]])
    np.testing.assert_array_equal(labels_of(hf_dataset()), LABELS)
    shuffled = hf_dataset().select([299, 0, 31])  # an indices mapping over the arrow table
    np.testing.assert_array_equal(labels_of(shuffled), LABELS[[299, 0, 31]])
    np.testing.assert_array_equal(labels_of(LABELS.tolist()), LABELS)


def test_labels_of_explains_what_is_missing() -> None:
    with pytest.raises(InvalidArgument, match="label_column must be one of 'label', 'x', got 'y'"):
        labels_of(hf_dataset(), label_column="y")
    with pytest.raises(
        InvalidArgument, match="needs a `targets` or `labels` attribute, TensorDataset"
    ):
        labels_of(TensorDataset(torch.zeros(3)))


def test_load_partition_returns_the_form_it_was_given() -> None:
    expected = dirichlet(LABELS, 6, 0.5, 3)[4]
    indices = load_partition(LABELS, 4, 6, "dirichlet", 3, alpha=0.5)
    np.testing.assert_array_equal(indices, expected)
    torch_part = load_partition(Digits(torch.from_numpy(LABELS)), 4, 6, "dirichlet", 3, alpha=0.5)
    assert isinstance(torch_part, Subset)
    assert list(torch_part.indices) == expected.tolist()
    hf_part = load_partition(hf_dataset(), 4, 6, "dirichlet", 3, alpha=0.5)
    assert isinstance(hf_part, datasets.Dataset)
    assert hf_part["x"][:] == expected.tolist()


def test_load_partition_computes_the_split_once_per_process() -> None:
    first = load_partition(LABELS, 0, 5, "shards", 11, shards_per_partition=2)
    again = load_partition(LABELS.copy(), 1, 5, "shards", 11, shards_per_partition=2)
    split = cached_split(LABELS, "shards", 5, 11, shards_per_partition=2)
    assert split[0] is first and split[1] is again  # the same cached arrays, not a recomputation
    assert not first.flags.writeable  # shared by every caller, so nobody may change it
    other_seed = load_partition(LABELS, 0, 5, "shards", 12, shards_per_partition=2)
    assert other_seed is not first
    changed = LABELS.copy()
    changed[0] = 9  # same object identity, new content: a new split
    assert cached_split(changed, "shards", 5, 11, shards_per_partition=2)[0] is not first


def test_load_partition_gives_the_same_partition_in_a_fresh_process() -> None:
    code = (
        "import json, numpy as np; from fl_async.partitioning import load_partition; "
        "labels = np.repeat(np.arange(10), 30); "
        "print(json.dumps([load_partition(labels, i, 6, 'label-skew', 5, "
        "classes_per_partition=3).tolist() for i in range(6)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    here = [
        load_partition(LABELS, i, 6, "label_skew", 5, classes_per_partition=3) for i in range(6)
    ]
    assert json.loads(result.stdout) == [part.tolist() for part in here]


def test_load_partition_refuses_bad_ids_and_generator_seeds() -> None:
    message = r"partition_id must be an integer in \[0, 5\], got 6; 5 is num_partitions - 1"
    with pytest.raises(InvalidArgument, match=message):
        load_partition(LABELS, 6, 6, "iid", 0)
    with pytest.raises(
        InvalidArgument, match=r"partition_id must be an integer in \[0, 5\], got -1"
    ):
        load_partition(LABELS, -1, 6, "iid", 0)
    with pytest.raises(InvalidArgument, match="seed must be an int for a cached split"):
        load_partition(LABELS, 0, 6, "iid", np.random.default_rng(0))


@pytest.mark.parametrize(
    ("partitioner", "scheme", "params"),
    [
        (IidPartitioner(6, seed=1), "iid", {}),
        (DirichletPartitioner(6, "label", 0.3, seed=1), "dirichlet", {"alpha": 0.3}),
        (
            LabelSkewPartitioner(6, "label", 2, seed=1),
            "label_skew",
            {"classes_per_partition": 2},
        ),
        (ShardsPartitioner(6, "label", 3, seed=1), "shards", {"shards_per_partition": 3}),
        (QuantitySkewPartitioner(6, alpha=2.0, seed=1), "quantity_skew", {"alpha": 2.0}),
    ],
)
def test_partitioners_load_the_schemes_partitions(
    partitioner: SchemePartitioner, scheme: str, params: dict[str, float]
) -> None:
    partitioner.dataset = hf_dataset()
    assert partitioner.num_partitions == 6
    expected = partition(LABELS, scheme, 6, 1, **params)
    for i in range(6):
        loaded = partitioner.load_partition(i)
        assert isinstance(loaded, datasets.Dataset)
        assert loaded["x"][:] == expected[i].tolist()
    with pytest.raises(InvalidArgument, match=r"partition_id must be an integer in \[0, 5\]"):
        partitioner.load_partition(6)


def test_partitioner_checks_its_parameters_when_built() -> None:
    with pytest.raises(InvalidArgument, match="alpha must be a finite number > 0, got -1.0"):
        DirichletPartitioner(4, "label", -1.0)
    with pytest.raises(
        InvalidArgument, match="classes_per_partition must be an integer >= 1, got 0"
    ):
        LabelSkewPartitioner(4, "label", 0)
    with pytest.raises(InvalidArgument, match="num_partitions must be an integer >= 1, got 0"):
        IidPartitioner(0)
    with pytest.raises(InvalidArgument, match="seed must be an integer >= 0, got True"):
        IidPartitioner(4, seed=True)
    with pytest.raises(InvalidArgument, match=r"'shards' got unknown parameter\(s\) \['alpha'\]"):
        SchemePartitioner("shards", 4, alpha=0.1)
    with pytest.raises(InvalidArgument, match="'dirichlet' needs partition_by"):
        SchemePartitioner("dirichlet", 4, partition_by=None, alpha=0.1)
    too_many = LabelSkewPartitioner(4, "label", 11)
    too_many.dataset = hf_dataset()
    with pytest.raises(
        InvalidArgument, match=r"classes_per_partition must be an integer in \[1, 10\]"
    ):
        too_many.load_partition(0)


def test_partitioner_works_inside_federated_dataset(tmp_path: Path) -> None:
    # A local parquet file stands in for a Hub dataset, so nothing is downloaded.
    hf_dataset().to_parquet(tmp_path / "train.parquet")
    partitioner = DirichletPartitioner(5, "label", 0.5, seed=2)
    fds = FederatedDataset(
        dataset="parquet",
        data_files={"train": str(tmp_path / "train.parquet")},
        partitioners={"train": partitioner},
        shuffle=False,
        cache_dir=str(tmp_path / "cache"),
    )
    expected = dirichlet(LABELS, 5, 0.5, 2)
    for i in range(5):
        assert fds.load_partition(i)["x"][:] == expected[i].tolist()


@pytest.mark.parametrize("self_balancing", [False, True])
@pytest.mark.parametrize("alpha", [0.1, 0.5, 2.0])
def test_dirichlet_skew_matches_flwr_datasets(alpha: float, self_balancing: bool) -> None:
    """Mean Hellinger distance, averaged over 10 seeds, within 0.03 of flwr-datasets'.

    Both implement the same per-class scheme, so only the random draws differ. Measured while
    writing this test, the seed-to-seed standard deviation of the mean Hellinger distance is
    0.012-0.025 here, so the standard error of the difference of two 10-seed averages is
    0.006-0.010; 0.03 is 3-5 of those, tight enough to catch a different scheme (between
    alpha 0.1 and 0.5 the level moves by more than 0.2).
    """
    labels = np.repeat(np.arange(10), 300)
    dataset = hf_dataset(labels)
    ours, theirs = [], []
    for seed in range(10):
        ours.append(
            heterogeneity(
                labels, dirichlet(labels, 20, alpha, seed, self_balancing=self_balancing)
            ).mean("hellinger")
        )
        flower = FlowerDirichletPartitioner(
            num_partitions=20,
            partition_by="label",
            alpha=alpha,
            min_partition_size=0,
            self_balancing=self_balancing,
            seed=seed,
        )
        flower.dataset = dataset
        flower_parts = [np.asarray(flower.load_partition(i)["x"][:]) for i in range(20)]
        theirs.append(heterogeneity(labels, flower_parts).mean("hellinger"))
    assert np.mean(ours) == pytest.approx(np.mean(theirs), abs=0.03)
