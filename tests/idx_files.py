"""Tiny MNIST-style IDX files in torchvision's on-disk layout, for tests that read real formats."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    """An IDX file: zero, the type code 0x08 (uint8), the rank, big-endian sizes, then the bytes."""
    payload = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    payload += array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(f"{path}.gz", "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


def make_idx_set(
    root: Path,
    folder: str,
    compress: bool,
    rng: np.random.Generator,
    n_train: int = 20,
    n_test: int = 10,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``root/folder/raw/{train,t10k}-*`` with random images and labels cycling through 0-9."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    arrays = {
        "train": (rng.integers(0, 256, (n_train, 28, 28)), np.arange(n_train) % 10),
        "t10k": (rng.integers(0, 256, (n_test, 28, 28)), np.arange(n_test) % 10),
    }
    for prefix, (images, labels) in arrays.items():
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images, compress)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, compress)
    return arrays
