"""IDX files (MNIST, Fashion-MNIST) read with numpy, as torchvision's ``MNIST`` reads them.

The format: two zero bytes, a type code (0x08: unsigned bytes, the only one these datasets
use), the number of dimensions, each dimension as a big-endian 32-bit integer, then the values.
Read here rather than through torchvision, whose import loads ``torch._dynamo`` (through
``torchvision.ops``): about 3 CPU-seconds in every process that reads the data, a simulation's
ServerApp and each of its actors, against well under one for these bytes. A file that is not
such an IDX file is refused with a ``ValueError`` naming it; nothing in it is run.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

UBYTE = 0x08
"""The type code of unsigned bytes."""


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """The uint8 array of the IDX file ``path`` (its ``.gz`` form where only that exists),
    which must have ``ndim`` dimensions (3 for images, 1 for labels)."""
    path = Path(path)
    payload = path.read_bytes() if path.is_file() else _gunzip(_gz(path))
    if len(payload) < 4 or payload[:2] != b"\0\0":
        raise ValueError(f"{path} is not an IDX file: it does not start with two zero bytes")
    code, rank = payload[2], payload[3]
    if code != UBYTE or rank != ndim:
        raise ValueError(
            f"{path}: type code 0x{code:02x} with {rank} dimension(s); "
            f"expected unsigned bytes (0x{UBYTE:02x}) with {ndim}"
        )
    header = 4 + 4 * rank
    shape = struct.unpack(f">{rank}I", payload[4:header]) if len(payload) >= header else ()
    expected = header + math.prod(shape) if shape else None  # Python ints: no overflow
    if expected is None or len(payload) != expected:
        raise ValueError(
            f"{path} holds {len(payload)} bytes; its header "
            f"{'is cut short' if expected is None else f'shape {shape} needs {expected}'}"
        )
    return np.frombuffer(bytearray(payload[header:]), dtype=np.uint8).reshape(shape)


def _gz(path: Path) -> Path:
    return path.with_name(f"{path.name}.gz")


def _gunzip(packed: Path) -> bytes:
    """The bytes inside the gzip file ``packed``; a damaged one raises ``ValueError``."""
    try:
        return gzip.decompress(packed.read_bytes())
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(f"{packed} is not a readable gzip file: {error}") from error
