"""The split schemes: each maps a 1-D integer label array to one int64 index array per partition.

``natural`` also takes each sample's owner (a writer, a device) and keeps every owner's samples
together; the others split by label alone.

Every scheme draws all its randomness from one ``numpy.random.Generator`` built from ``seed``, so
one seed gives the same split on every machine (with the same numpy version). Every sample is
assigned to exactly one partition, except in ``label_skew`` when ``num_partitions *
classes_per_partition`` is below the number of classes (then unheld classes are left out). Each
partition's indices come in random order, so a client reading them in order sees shuffled labels.

Work is linear in the number of samples: two permutations and two stable sorts of small integer
codes (radix sorts). ``dirichlet`` and ``label_skew`` also hold a classes x partitions matrix;
``natural`` sorts the owner ids once (``numpy.unique``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from fl_async.validation import InvalidArgument, check_int, check_number

from ._draws import (
    Partitions,
    _check_dirichlet_options,
    _check_min_size,
    _choose_classes,
    _dirichlet_draw,
    _draw_until_large_enough,
    _group,
    _order_by_class,
    _split_counts,
)
from ._labels import class_codes
from ._validation import Seed, as_labels, as_owners, as_rng, check_at_most, check_num_partitions


def iid(labels: Any, num_partitions: int, seed: Seed) -> Partitions:
    """Split uniformly at random into partitions whose sizes differ by at most one."""
    labels = as_labels(labels)
    num_partitions = check_num_partitions(num_partitions, labels.size)
    return np.array_split(as_rng(seed).permutation(labels.size), num_partitions)


def dirichlet(
    labels: Any,
    num_partitions: int,
    alpha: float,
    seed: Seed,
    min_partition_size: int = 0,
    *,
    self_balancing: bool = False,
    max_tries: int = 10,
) -> Partitions:
    """Split each class among the partitions in proportions drawn from Dir(alpha).

    The per-class scheme of NIID-Bench and flwr-datasets' ``DirichletPartitioner``: small
    ``alpha`` gives each partition few classes, large ``alpha`` approaches IID.

    Parameters
    ----------
    labels : array-like of int, shape (n,)
        Class label of each sample.
    num_partitions : int
        Number of partitions, between 1 and n.
    alpha : float
        Concentration of the Dirichlet distribution, > 0.
    seed : int or numpy.random.Generator
        Source of every random choice.
    min_partition_size : int
        Smallest allowed partition, between 0 and n // num_partitions. A draw that leaves a
        partition smaller is redrawn, at most ``max_tries`` times in all.
    self_balancing : bool
        As in flwr-datasets: while classes are dealt out in ascending order, a partition that
        already holds more than n / num_partitions samples gets no share of the next class.
    max_tries : int
        Number of draws before giving up with a ValueError that says what to change.
    """
    labels = as_labels(labels)
    num_partitions = check_num_partitions(num_partitions, labels.size)
    alpha, min_partition_size, max_tries = _check_dirichlet_options(
        alpha, min_partition_size, self_balancing, max_tries, labels.size, num_partitions
    )
    rng = as_rng(seed)
    _, codes, class_sizes = class_codes(labels)
    order = _order_by_class(codes, class_sizes.size, rng)
    draw = _dirichlet_draw(rng, alpha, num_partitions, class_sizes, labels.size, self_balancing)
    counts = _draw_until_large_enough(
        draw, min_partition_size, max_tries, "dirichlet", alpha, num_partitions
    )
    owner = np.empty(labels.size, dtype=np.intp)
    owner[order] = np.repeat(np.tile(np.arange(num_partitions), class_sizes.size), counts.ravel())
    return _group(owner, num_partitions, rng)


def label_skew(
    labels: Any, num_partitions: int, classes_per_partition: int, seed: Seed
) -> Partitions:
    """Give each partition exactly ``classes_per_partition`` classes (NIID-Bench's #C=k).

    Classes are dealt round-robin from a random order first, so that every class has a holder
    whenever ``num_partitions * classes_per_partition`` reaches the number of classes (otherwise
    a random ``num_partitions * classes_per_partition`` of them are held, each once); the
    remaining places are filled with distinct random classes. Each class's samples are split
    evenly among its holders. Raises ValueError if some class has fewer samples than holders.
    """
    labels = as_labels(labels)
    num_partitions = check_num_partitions(num_partitions, labels.size)
    classes, codes, class_sizes = class_codes(labels)
    num_classes = class_sizes.size
    k = check_at_most(
        "classes_per_partition", classes_per_partition, 1, num_classes, "the number of classes"
    )
    rng = as_rng(seed)
    held = _choose_classes(num_classes, num_partitions, k, rng)
    holders = np.bincount(held.ravel(), minlength=num_classes)
    short = np.flatnonzero(holders > class_sizes)
    if short.size:
        c = short[0]
        raise ValueError(
            f"label_skew cannot give every partition {k} classes: class {classes[c]} has "
            f"{class_sizes[c]} samples for {holders[c]} partitions holding it; use fewer "
            f"partitions or a smaller classes_per_partition"
        )
    order = _order_by_class(codes, num_classes, rng)

    # One slot per (class, holder), sorted by class to line up with ``order``; an unheld class
    # gets a single slot owned by ``num_partitions``, the "unassigned" mark of ``_group``.
    unheld = np.flatnonzero(holders == 0)
    slot_class = np.concatenate([held.ravel(), unheld])
    slot_owner = np.concatenate(
        [np.repeat(np.arange(num_partitions), k), np.full(unheld.size, num_partitions)]
    )
    by_class = np.argsort(slot_class, kind="stable")
    slot_class, slot_owner = slot_class[by_class], slot_owner[by_class]
    slots = np.maximum(holders, 1)
    rank = np.arange(slot_class.size) - (np.cumsum(slots) - slots)[slot_class]
    size, extra = np.divmod(class_sizes, slots)
    share = size[slot_class] + (rank < extra[slot_class])

    owner = np.empty(labels.size, dtype=np.intp)
    owner[order] = np.repeat(slot_owner, share)
    return _group(owner, num_partitions, rng)


def shards(labels: Any, num_partitions: int, shards_per_partition: int, seed: Seed) -> Partitions:
    """Sort by label, cut into ``num_partitions * shards_per_partition`` shards, deal them out.

    McMahan et al.'s pathological split. Shard sizes differ by at most one so that every sample
    is assigned; within a class the samples are shuffled before cutting.
    """
    labels = as_labels(labels)
    num_partitions = check_num_partitions(num_partitions, labels.size)
    per_partition = check_at_most(
        "shards_per_partition",
        shards_per_partition,
        1,
        labels.size // num_partitions,
        "the number of samples // num_partitions",
    )
    rng = as_rng(seed)
    _, codes, class_sizes = class_codes(labels)
    order = _order_by_class(codes, class_sizes.size, rng)
    num_shards = num_partitions * per_partition
    size, extra = divmod(labels.size, num_shards)
    shard_sizes = size + (np.arange(num_shards) < extra)
    shard_owner = np.empty(num_shards, dtype=np.intp)
    shard_owner[rng.permutation(num_shards)] = np.arange(num_shards) // per_partition
    owner = np.empty(labels.size, dtype=np.intp)
    owner[order] = np.repeat(shard_owner, shard_sizes)
    return _group(owner, num_partitions, rng)


def quantity_skew(
    labels: Any,
    num_partitions: int,
    seed: Seed,
    *,
    alpha: float = 0.5,
    min_partition_size: int = 0,
    max_tries: int = 10,
) -> Partitions:
    """Split with IID labels but skewed sizes: size proportions drawn from Dir(alpha).

    NIID-Bench's quantity skew (its default concentration is 0.5): small ``alpha`` gives a few
    large partitions and many small ones, large ``alpha`` near-equal sizes. ``min_partition_size``
    and ``max_tries`` work as in :func:`dirichlet`.
    """
    labels = as_labels(labels)
    num_partitions = check_num_partitions(num_partitions, labels.size)
    alpha = check_number("alpha", alpha, minimum=0, min_open=True)
    min_partition_size = _check_min_size(min_partition_size, labels.size, num_partitions)
    max_tries = check_int("max_tries", max_tries, minimum=1)
    rng = as_rng(seed)
    concentration = np.full(num_partitions, alpha)
    total = np.array([labels.size])

    def draw() -> np.ndarray:
        return _split_counts(rng.dirichlet(concentration)[None, :], total)

    counts = _draw_until_large_enough(
        draw, min_partition_size, max_tries, "quantity_skew", alpha, num_partitions
    )
    return np.split(rng.permutation(labels.size), np.cumsum(counts[0])[:-1])


def natural(labels: Any, num_partitions: int, owners: Any, seed: Seed) -> Partitions:
    """Give every natural owner (a writer, a device) wholly to one partition.

    The distinct owner ids, sorted, are put in a random order drawn from ``seed`` and dealt
    round-robin: the owner at position j goes to partition ``j % num_partitions``. So each
    partition holds ``num_owners // num_partitions`` or one more owners, and exactly one when
    the two numbers are equal; :func:`natural_assignment` tells which. Fewer owners than
    partitions is an error naming both numbers.

    Parameters
    ----------
    labels : array-like of int, shape (n,)
        Class label of each sample (only their number is used).
    num_partitions : int
        Number of partitions, between 1 and the number of distinct owners.
    owners : array-like of int or str, shape (n,)
        The owner id of each sample.
    seed : int or numpy.random.Generator
        Source of every random choice.
    """
    labels = as_labels(labels)
    ids, codes = as_owners(owners, labels.size)
    rng = as_rng(seed)
    partition_of = _deal_owners(ids.size, num_partitions, rng)
    return _group(partition_of[codes], num_partitions, rng)


def natural_assignment(owners: Any, num_partitions: int, seed: int) -> dict[int, np.ndarray]:
    """Partition id -> the sorted owner ids :func:`natural` gives it with the same int ``seed``."""
    if isinstance(seed, np.random.Generator):
        raise InvalidArgument(
            "seed must be an int here, got a numpy.random.Generator: its draws depend on its "
            "past use, so they could not match those of the split"
        )
    ids, _ = as_owners(owners, np.size(owners))
    partition_of = _deal_owners(ids.size, num_partitions, as_rng(seed))
    return {p: ids[partition_of == p] for p in range(num_partitions)}


def _deal_owners(num_owners: int, num_partitions: Any, rng: np.random.Generator) -> np.ndarray:
    """The partition of each owner code: a random order of the owners, dealt round-robin."""
    num_partitions = check_at_most(
        "num_partitions", num_partitions, 1, num_owners, "the number of distinct owners"
    )
    partition_of = np.empty(num_owners, dtype=np.intp)
    partition_of[rng.permutation(num_owners)] = np.arange(num_owners) % num_partitions
    return partition_of


SCHEMES: dict[str, Callable[..., Partitions]] = {
    "iid": iid,
    "dirichlet": dirichlet,
    "label_skew": label_skew,
    "shards": shards,
    "quantity_skew": quantity_skew,
    "natural": natural,
}
"""Scheme name -> function; :func:`partition` also accepts hyphens (``label-skew``)."""


def scheme_name(scheme: str) -> str:
    """Return the canonical name of ``scheme`` (hyphens become underscores)."""
    if isinstance(scheme, str) and scheme.replace("-", "_") in SCHEMES:
        return scheme.replace("-", "_")
    raise InvalidArgument(f"unknown scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")


def scheme_parameters(scheme: str) -> dict[str, Any]:
    """Return the parameters of ``scheme`` besides labels, num_partitions and seed, with their
    defaults (``inspect.Parameter.empty`` where the parameter is required)."""
    signature = inspect.signature(SCHEMES[scheme_name(scheme)])
    return {
        name: parameter.default
        for name, parameter in signature.parameters.items()
        if name not in ("labels", "num_partitions", "seed")
    }


def partition(
    labels: Any, scheme: str, num_partitions: int, seed: Seed, **params: Any
) -> Partitions:
    """Split ``labels`` with the scheme named ``scheme``, passing it ``params``."""
    name = scheme_name(scheme)
    allowed = scheme_parameters(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no parameters"
        raise InvalidArgument(
            f"scheme {name!r} got unknown parameter(s) {unknown}; it takes: {takes}"
        )
    missing = [p for p, default in allowed.items() if default is inspect.Parameter.empty]
    missing = [p for p in missing if p not in params]
    if missing:
        raise InvalidArgument(f"scheme {name!r} needs parameter(s) {missing}")
    return SCHEMES[name](labels, num_partitions=num_partitions, seed=seed, **params)
