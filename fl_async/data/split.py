"""Deterministic stratified train/test split for datasets that ship without a test split."""

from __future__ import annotations

import numpy as np

from fl_async.validation import InvalidArgument, check_number, check_seed

DEFAULT_TEST_FRACTION = 0.2
DEFAULT_SPLIT_SEED = 0


def stratified_split(
    labels: np.ndarray,
    *,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    seed: int = DEFAULT_SPLIT_SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices holding out ``round(test_fraction · n_c)`` examples of each class c.

    Both index arrays come in a seeded random order, so no split is sorted by class.
    """
    test_fraction = check_number(
        "test_fraction", test_fraction, minimum=0, maximum=1, min_open=True, max_open=True
    )
    labels = np.asarray(labels)
    rng = np.random.default_rng(check_seed("seed", seed))
    train_parts, test_parts = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out = int(round(len(members) * test_fraction))
        test_parts.append(members[:held_out])
        train_parts.append(members[held_out:])
    train = rng.permutation(np.concatenate(train_parts)).astype(np.int64)
    test = rng.permutation(np.concatenate(test_parts)).astype(np.int64)
    if len(train) == 0 or len(test) == 0:
        raise InvalidArgument(
            f"a test_fraction of {test_fraction} leaves an empty split of {len(labels)} examples"
        )
    return train, test
