"""``DataSpec``: which dataset, model and split a run uses, read from its run config
(``fl_async.config`` checks every key). The ServerApp and every node read it alike, so they agree
on each node's partition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_async.config import NODE_KEYS, SCHEMA, SYNTHETIC, read
from fl_async.partitioning import cached_split, scheme_parameters
from fl_async.validation import InvalidArgument


@dataclass(frozen=True)
class DataSpec:
    """Which dataset, model and split a run uses (the server and every node agree on it)."""

    dataset: str
    root: str
    model: str
    seed: int
    scheme: str
    params: tuple[tuple[str, Any], ...]
    """The scheme's own parameters (snake_case) from the ``partition.*`` keys."""
    owner_column: str = ""
    """The Hugging Face column naming each example's owner ("": ``writer_id`` when present)."""
    synthetic: tuple[tuple[str, Any], ...] = ()
    """``dataset = "synthetic"``: its parameters (snake_case) from the ``synthetic.*`` keys."""

    @classmethod
    def from_config(cls, run_config: Mapping[str, Any]) -> DataSpec:
        """Read the data keys of ``run_config`` (defaults for missing ones); ``synthetic`` is
        split by device whatever ``partition.scheme`` says."""
        dataset = str(read("dataset", run_config))
        scheme = "natural" if dataset == SYNTHETIC else str(read("partition.scheme", run_config))
        synthetic = [
            (key.removeprefix("synthetic.").replace("-", "_"), read(key, run_config))
            for key in NODE_KEYS
            if dataset == SYNTHETIC and key.startswith("synthetic.")
        ]
        params = []
        for name in scheme_parameters(scheme):
            key = "partition." + name.replace("_", "-")
            if key in SCHEMA:
                params.append((name, read(key, run_config)))
        return cls(
            dataset=dataset,
            root=str(read("data-root", run_config)),
            model=str(read("model", run_config)),
            seed=int(read("seed", run_config)),
            scheme=scheme,
            params=tuple(params),
            owner_column=str(read("partition.owner-column", run_config)),
            synthetic=tuple(synthetic),
        )

    def split(
        self, labels: np.ndarray, num_partitions: int, owners: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Indices of every partition of the train ``labels`` (computed once per process);
        ``natural`` needs the ``owners`` of the train examples, the other schemes ignore them."""
        params = dict(self.params)
        if self.scheme == "natural":
            if owners is None:
                raise InvalidArgument(
                    f"partition.scheme 'natural' needs the owner of every training example, and "
                    f"dataset {self.dataset!r} has none; natural works with: femnist, synthetic, "
                    "or a Hugging Face dataset with an owner column (partition.owner-column, "
                    "default writer_id)"
                )
            params["owners"] = owners
        return cached_split(labels, self.scheme, num_partitions, self.seed, **params)
