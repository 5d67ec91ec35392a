"""A tiny FEMNIST in the Hub cache layout that ``snapshot_download`` leaves for flwrlabs/femnist.

Columns as on the dataset card: ``image`` (28×28 grey), ``writer_id`` (string), ``hsf_id``
(int) and ``character`` (a ClassLabel of 62 classes: digits, upper case, lower case). Pixels
(0, 0) and (0, 1) of each image hold its row number (low and high byte), so a test can tell
which row of the file an example came from.
"""

from __future__ import annotations

import string
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

COMMIT = "fe0123456789abcdef0123456789abcdef012345"
CHARACTERS = list(string.digits + string.ascii_uppercase + string.ascii_lowercase)
FEATURES = datasets.Features(
    {
        "image": datasets.Image(),
        "writer_id": datasets.Value("string"),
        "hsf_id": datasets.Value("int64"),
        "character": datasets.ClassLabel(names=CHARACTERS),
    }
)


def femnist_rows(
    writers: int = 8, per_writer: int = 15, classes: int = 10, seed: int = 0
) -> dict[str, list]:
    """The columns of a FEMNIST-format table, rows in writer order as on the Hub."""
    rng = np.random.default_rng(seed)
    rows = writers * per_writer
    pictures = rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8)
    pictures[:, 0, 0], pictures[:, 0, 1] = np.arange(rows) % 256, np.arange(rows) // 256
    # Writer w writes mostly its own few characters: the natural skew of FEMNIST.
    characters = (np.repeat(np.arange(writers), per_writer) * 3 + np.arange(rows) % 4) % classes
    names = [f"f{w * 7 % writers:04d}_{w:02d}" for w in range(writers)]  # not in row order
    return {
        "image": [Image.fromarray(picture) for picture in pictures],
        "writer_id": np.repeat(names, per_writer).tolist(),
        "hsf_id": np.repeat(np.arange(writers) % 8, per_writer).tolist(),
        "character": characters.tolist(),
    }


def write_femnist(cache: Path, **shape: int) -> datasets.Dataset:
    """Write a tiny flwrlabs/femnist snapshot into the Hub cache ``cache``; return its table."""
    table = datasets.Dataset.from_dict(femnist_rows(**shape), features=FEATURES)
    repo = cache / "datasets--flwrlabs--femnist"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    table.to_parquet(repo / "snapshots" / COMMIT / "data" / "train-00000-of-00001.parquet")
    return table


def row_of(images) -> np.ndarray:
    """The row number each image (N×1×28×28, as loaded) was written from."""
    pixels = np.asarray(images)[:, 0, 0, :2].astype(np.int64)
    return pixels[:, 0] + 256 * pixels[:, 1]
