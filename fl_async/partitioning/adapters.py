"""Splits of real datasets: labels of torchvision and Hugging Face datasets, and one partition
by ``partition-id`` for a ClientApp.

torch and datasets are imported only when a dataset of theirs is handed in.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument, check_choice

from ._validation import as_labels, check_at_most
from .schemes import Partitions, partition, scheme_name

_CACHE_SIZE = 8  # full splits kept per process; a simulation uses one or two at a time
_cache: OrderedDict[tuple[Any, ...], Partitions] = OrderedDict()
_cache_lock = threading.Lock()


def labels_of(data: Any, *, label_column: str = "label") -> np.ndarray:
    """Return the labels of ``data`` as a 1-D integer array.

    ``data`` is a Hugging Face ``datasets.Dataset`` (labels from ``label_column``), a torchvision
    dataset (its ``targets``, or ``labels`` as in SVHN), a ``torch.utils.data.Subset`` of one, or
    the labels themselves (list, numpy array or CPU tensor).
    """
    if _is_hf_dataset(data):
        check_choice("label_column", label_column, data.column_names)
        # The arrow format hands over the column without converting row by row, and it
        # respects a dataset's select/shuffle indices.
        return as_labels(data.with_format("arrow")[label_column][:].to_numpy())
    if hasattr(data, "dataset") and hasattr(data, "indices"):  # torch.utils.data.Subset
        return labels_of(data.dataset)[np.asarray(data.indices, dtype=np.int64)]
    for attribute in ("targets", "labels"):
        if hasattr(data, attribute):
            return as_labels(_to_numpy(getattr(data, attribute)))
    if _is_torch_dataset(data):
        raise InvalidArgument(
            f"a torch dataset needs a `targets` or `labels` attribute, {type(data).__name__} has "
            "neither; pass its labels instead"
        )
    return as_labels(_to_numpy(data))


def owners_of(data: Any, *, owner_column: str = "writer_id") -> np.ndarray:
    """Return the owner id of each sample of a Hugging Face ``datasets.Dataset``, read from
    ``owner_column`` through Arrow (images are not decoded), for the ``natural`` scheme."""
    if not _is_hf_dataset(data):
        raise InvalidArgument(
            f"owners_of reads a datasets.Dataset's owner column, got {type(data).__name__}; "
            "pass the owner ids themselves instead"
        )
    check_choice("owner_column", owner_column, data.column_names)
    column = data.with_format("arrow")[owner_column][:]
    if column.null_count:
        raise InvalidArgument(
            f"owner column {owner_column!r} has {column.null_count} missing values; every "
            "sample needs an owner"
        )
    return column.to_numpy(zero_copy_only=False)


def load_partition(
    data: Any,
    partition_id: int,
    num_partitions: int,
    scheme: str,
    seed: int,
    *,
    label_column: str = "label",
    **params: Any,
) -> Any:
    """Return partition ``partition_id`` of the split of ``data`` by ``scheme``.

    Every process that passes the same labels, scheme, parameters and seed gets the same
    partition, so a ClientApp can call this with its own ``partition-id``. The full split is
    cached per process (keyed by the labels' content, not their identity), so serving many
    virtual nodes computes it once.

    Parameters
    ----------
    data : labels, torchvision dataset or datasets.Dataset
        As for ``labels_of``.
    partition_id : int
        Which partition, between 0 and ``num_partitions - 1``.
    num_partitions, scheme, seed, **params
        As for ``partition``, but ``seed`` must be an int (see ``cached_split``).
    label_column : str
        Label column of a Hugging Face dataset.

    Returns
    -------
    The partition in the form ``data`` came in: an int64 index array for labels, a
    ``torch.utils.data.Subset`` for a torch dataset, a ``datasets.Dataset`` for a Hugging Face
    dataset.
    """
    labels = labels_of(data, label_column=label_column)
    parts = cached_split(labels, scheme, num_partitions, seed, **params)
    partition_id = check_at_most(
        "partition_id", partition_id, 0, len(parts) - 1, "num_partitions - 1"
    )
    return subset(data, parts[partition_id])


def cached_split(
    labels: np.ndarray, scheme: str, num_partitions: int, seed: int, **params: Any
) -> Partitions:
    """``partition``, memoised per process on the labels' content.

    The returned arrays are read-only because they are shared by every caller. ``seed`` must be
    an int: a Generator's draws depend on its past use, so processes would disagree on the split.
    """
    if isinstance(seed, np.random.Generator):
        raise InvalidArgument(
            "seed must be an int for a cached split, got a numpy.random.Generator"
        )
    labels = as_labels(labels)
    key = (
        _digest(labels),
        scheme_name(scheme),
        num_partitions,
        seed,
        tuple(sorted((name, _hashable(value)) for name, value in params.items())),
    )
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return list(_cache[key])  # a new list, so a caller's edits cannot reach the cache
    parts = partition(labels, scheme, num_partitions, seed, **params)
    for part in parts:
        part.flags.writeable = False
    with _cache_lock:
        _cache[key] = parts
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return list(parts)


def _digest(array: np.ndarray) -> tuple[str, str, tuple[int, ...]]:
    """The content of ``array`` as a cache key: a hash of its bytes, its dtype and its shape."""
    if array.dtype.kind == "O":  # Python objects have no stable bytes; their text does
        array = array.astype(str)
    digest = hashlib.blake2b(np.ascontiguousarray(array).view(np.uint8), digest_size=16)
    return digest.hexdigest(), array.dtype.str, array.shape


def _hashable(value: Any) -> Any:
    """A parameter as part of a cache key: arrays (the ``natural`` owners) by their content."""
    if isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "detach"):
        return _digest(np.asarray(_to_numpy(value)))
    return value


def subset(data: Any, indices: np.ndarray) -> Any:
    """Return the samples ``indices`` of ``data`` in its own form (see ``load_partition``)."""
    if _is_hf_dataset(data):
        return data.select(indices)
    if _is_torch_dataset(data):
        from torch.utils.data import Subset

        return Subset(data, indices.tolist())
    return indices


def _is_hf_dataset(data: Any) -> bool:
    # Checking the module first keeps ``datasets`` unimported for users who never pass one.
    if not type(data).__module__.startswith("datasets."):
        return False
    import datasets

    return isinstance(data, datasets.Dataset)


def _is_torch_dataset(data: Any) -> bool:
    if not any(cls.__module__.startswith(("torch", "torchvision")) for cls in type(data).__mro__):
        return False
    from torch.utils.data import Dataset

    return isinstance(data, Dataset)


def _to_numpy(values: Any) -> Any:
    """A CPU copy of a torch tensor (which may live on a GPU); anything else unchanged."""
    return values.detach().cpu().numpy() if hasattr(values, "detach") else values
