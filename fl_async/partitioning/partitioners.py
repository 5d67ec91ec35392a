"""flwr-datasets partitioners for every scheme, for ``FederatedDataset(partitioners=...)``.

Importing this module imports flwr-datasets; ``fl_async.partitioning`` only does so when one of
these classes is first used. The split is computed once, on the first ``load_partition``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_async.extras import require
from fl_async.validation import InvalidArgument, check_int, check_number, check_seed

from ._validation import check_at_most
from .adapters import labels_of, owners_of
from .schemes import (
    Partitions,
    natural,
    natural_assignment,
    partition,
    scheme_name,
    scheme_parameters,
)

require("flwr-datasets partitioners", "datasets", "flwr_datasets")
import datasets  # noqa: E402 (after the check that names the extra to install)
from flwr_datasets.partitioner import Partitioner  # noqa: E402


class SchemePartitioner(Partitioner):
    """Partition a ``datasets.Dataset`` with any scheme of ``fl_async.partitioning``.

    Parameters
    ----------
    scheme : str
        A scheme name, as for ``partition``.
    num_partitions : int
        Number of partitions.
    partition_by : str or None
        The label column. ``None`` is allowed for schemes that ignore labels (``iid``,
        ``quantity_skew``).
    seed : int
        Seed of the split (flwr-datasets' partitioners default to 42 too).
    **params
        The scheme's parameters.
    """

    def __init__(
        self,
        scheme: str,
        num_partitions: int,
        *,
        partition_by: str | None = "label",
        seed: int = 42,
        **params: Any,
    ) -> None:
        super().__init__()
        self._scheme = scheme_name(scheme)
        allowed = scheme_parameters(self._scheme)
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise InvalidArgument(f"scheme {self._scheme!r} got unknown parameter(s) {unknown}")
        if partition_by is None and self._scheme not in ("iid", "quantity_skew"):
            raise InvalidArgument(f"scheme {self._scheme!r} needs partition_by, the label column")
        self._num_partitions = check_int("num_partitions", num_partitions, minimum=1)
        self._partition_by = partition_by
        self._seed = check_seed("seed", seed)
        self._params = params
        self._partitions: Partitions | None = None

    @property
    def num_partitions(self) -> int:
        """Total number of partitions."""
        return self._num_partitions

    @property
    def partitions(self) -> Partitions:
        """Index arrays of all partitions (computed on first use), e.g. for ``heterogeneity``."""
        if self._partitions is None:
            if self._partition_by is None:
                labels = np.zeros(self.dataset.num_rows, dtype=np.int8)  # the scheme ignores them
            else:
                labels = labels_of(self.dataset, label_column=self._partition_by)
            self._partitions = partition(
                labels, self._scheme, self._num_partitions, self._seed, **self._params
            )
        return self._partitions

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """Return partition ``partition_id`` as a ``datasets.Dataset``."""
        partition_id = check_at_most(
            "partition_id", partition_id, 0, self._num_partitions - 1, "num_partitions - 1"
        )
        return self.dataset.select(self.partitions[partition_id])


class IidPartitioner(SchemePartitioner):
    """Uniformly random partitions whose sizes differ by at most one (labels are not read)."""

    def __init__(self, num_partitions: int, *, seed: int = 42) -> None:
        super().__init__("iid", num_partitions, partition_by=None, seed=seed)


class DirichletPartitioner(SchemePartitioner):
    """Each class split in proportions drawn from Dir(alpha); see ``dirichlet``."""

    def __init__(
        self,
        num_partitions: int,
        partition_by: str,
        alpha: float,
        *,
        min_partition_size: int = 0,
        self_balancing: bool = False,
        max_tries: int = 10,
        seed: int = 42,
    ) -> None:
        super().__init__(
            "dirichlet",
            num_partitions,
            partition_by=partition_by,
            seed=seed,
            alpha=check_number("alpha", alpha, minimum=0, min_open=True),
            min_partition_size=check_int("min_partition_size", min_partition_size, minimum=0),
            self_balancing=self_balancing,
            max_tries=check_int("max_tries", max_tries, minimum=1),
        )


class LabelSkewPartitioner(SchemePartitioner):
    """Exactly ``classes_per_partition`` classes per partition; see ``label_skew``."""

    def __init__(
        self, num_partitions: int, partition_by: str, classes_per_partition: int, *, seed: int = 42
    ) -> None:
        super().__init__(
            "label_skew",
            num_partitions,
            partition_by=partition_by,
            seed=seed,
            classes_per_partition=check_int(
                "classes_per_partition", classes_per_partition, minimum=1
            ),
        )


class ShardsPartitioner(SchemePartitioner):
    """Label-sorted shards, ``shards_per_partition`` each; see ``shards``."""

    def __init__(
        self, num_partitions: int, partition_by: str, shards_per_partition: int, *, seed: int = 42
    ) -> None:
        super().__init__(
            "shards",
            num_partitions,
            partition_by=partition_by,
            seed=seed,
            shards_per_partition=check_int("shards_per_partition", shards_per_partition, minimum=1),
        )


class QuantitySkewPartitioner(SchemePartitioner):
    """IID labels, sizes drawn from Dir(alpha); see ``quantity_skew``."""

    def __init__(
        self,
        num_partitions: int,
        *,
        alpha: float = 0.5,
        min_partition_size: int = 0,
        max_tries: int = 10,
        seed: int = 42,
    ) -> None:
        super().__init__(
            "quantity_skew",
            num_partitions,
            partition_by=None,
            seed=seed,
            alpha=check_number("alpha", alpha, minimum=0, min_open=True),
            min_partition_size=check_int("min_partition_size", min_partition_size, minimum=0),
            max_tries=check_int("max_tries", max_tries, minimum=1),
        )


class NaturalPartitioner(SchemePartitioner):
    """Each natural owner (a value of the ``partition_by`` column, e.g. a writer) wholly in one
    partition; see ``natural``.

    Unlike flwr-datasets' ``NaturalIdPartitioner`` (one partition per id, in sorted order), the
    number of partitions is chosen: the owners, in a seeded random order, are dealt round-robin.
    """

    def __init__(
        self, num_partitions: int, partition_by: str = "writer_id", *, seed: int = 42
    ) -> None:
        super().__init__("natural", num_partitions, partition_by=partition_by, seed=seed)

    @property
    def partitions(self) -> Partitions:
        """Index arrays of all partitions (computed on first use), e.g. for ``heterogeneity``."""
        if self._partitions is None:
            owners = owners_of(self.dataset, owner_column=self._partition_by)
            labels = np.zeros(owners.size, dtype=np.int8)  # the scheme reads only the owners
            self._partitions = natural(labels, self._num_partitions, owners, self._seed)
        return self._partitions

    @property
    def partition_id_to_natural_ids(self) -> dict[int, np.ndarray]:
        """Partition id -> the sorted owner ids it holds."""
        owners = owners_of(self.dataset, owner_column=self._partition_by)
        return natural_assignment(owners, self._num_partitions, self._seed)
