"""The learning task shared by both apps: node ``k`` minimises ``||w - target_k||^2 / 2``."""

from __future__ import annotations

import numpy as np

DIM = 6


def target(partition: int) -> np.ndarray:
    """Node ``partition``'s optimum (fixed by its partition id)."""
    return np.random.default_rng(partition).normal(size=DIM).astype(np.float32)


def loss(w: np.ndarray, num_partitions: int) -> float:
    """The federation's mean loss at ``w``."""
    return float(np.mean([0.5 * np.sum((w - target(k)) ** 2) for k in range(num_partitions)]))
