"""State files: a tree of plain values and numpy arrays, stored so that reading it runs no code.

A file is three parts: the line ``fl-async-state 1``; a manifest line (JSON) with the payload's
length and SHA-256; the payload, one line of JSON (the tree) followed by the arrays' raw bytes.
The tree holds ``None``, ``bool``, ``int``, ``float`` (inf and NaN too), ``str``, lists, tuples,
dicts with keys of those types, numpy arrays and numpy scalars of the numeric dtypes (bool,
signed and unsigned integers, floats): each comes back with the same type, dtype, shape and bits.

State files may be appended one after another to one file (``loads_all`` reads them back in
order): each keeps its own manifest and checksum.

Reading parses JSON and copies bytes into arrays of an allowed dtype, nothing else: no pickle, no
import, no call chosen by the file. The checksum detects a truncated or corrupted file; it does
not authenticate the writer (whoever can write the file can write a matching checksum).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

MAGIC = b"fl-async-state 1\n"
_TAG = "$"  # every value JSON cannot hold as itself is an object with one key starting with it
_DTYPE_KINDS = frozenset("biuf")  # bool, signed, unsigned, floating point
_MAX_DIMS = 64
MAX_DEPTH = 200
"""How deep a tree may nest; deeper is refused (writing) or reported as damage (reading)."""


class StateFileError(ValueError):
    """Bytes that are not an intact state file (foreign, truncated, corrupted, or tampered)."""


def dumps(tree: Any) -> bytes:
    """The state file holding ``tree``; ``TypeError`` naming the first value it cannot hold."""
    arrays: list[np.ndarray] = []
    encoded = _encode(tree, arrays, "tree", 0)
    table, offset = [], 0
    for array in arrays:
        table.append({"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset})
        offset += array.nbytes
    head = json.dumps({"arrays": table, "tree": encoded}, allow_nan=False, separators=(",", ":"))
    payload = b"".join([head.encode("utf-8"), b"\n", *(a.tobytes() for a in arrays)])
    manifest = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return MAGIC + json.dumps(manifest).encode("ascii") + b"\n" + payload


def loads(data: bytes) -> Any:
    """The tree that ``dumps`` wrote into ``data``; ``StateFileError`` saying what is wrong."""
    payload, end = _frame(data, 0)
    if end != len(data):
        raise StateFileError(
            f"truncated or padded: the payload has {len(data) - end + len(payload)} bytes, the "
            f"manifest says {len(payload)}"
        )
    return _tree(payload)


def loads_all(data: bytes) -> list[Any]:
    """The trees of the state files written one after another into ``data`` (a file that
    ``dumps``'s outputs were appended to), in order; ``StateFileError`` naming the first that is
    not intact (the count of those before it in the message)."""
    trees, start = [], 0
    while start < len(data):
        try:
            payload, start = _frame(data, start)
            trees.append(_tree(payload))
        except StateFileError as error:
            raise StateFileError(f"part {len(trees) + 1}: {error}") from None
    return trees


def _frame(data: bytes, start: int) -> tuple[bytes, int]:
    """The checked payload of the state file at ``data[start:]`` and the offset just past it."""
    if not data.startswith(MAGIC, start):
        raise StateFileError(
            "not an fl-async state file (its first line is not 'fl-async-state 1')"
        )
    end = data.find(b"\n", start + len(MAGIC))
    manifest = _json(data[start + len(MAGIC) : end] if end >= 0 else b"", "manifest")
    if not isinstance(manifest, dict) or type(manifest.get("bytes")) is not int:
        raise StateFileError("damaged: its manifest line does not give the payload's length")
    size = manifest["bytes"]
    payload = data[end + 1 : end + 1 + size] if size >= 0 else b""
    if size < 0 or len(payload) != size:
        raise StateFileError(
            f"truncated or padded: the payload has {len(data) - end - 1} bytes, the manifest "
            f"says {size}"
        )
    if hashlib.sha256(payload).hexdigest() != manifest.get("sha256"):
        raise StateFileError("corrupted: the payload's SHA-256 does not match the manifest")
    return payload, end + 1 + size


def _tree(payload: bytes) -> Any:
    """The tree of a checked payload."""
    split = payload.find(b"\n")
    head = _json(payload[:split] if split >= 0 else b"", "tree")
    if not isinstance(head, dict) or not isinstance(head.get("arrays"), list):
        raise StateFileError("damaged: the payload does not start with a tree and an array table")
    buffer = memoryview(payload)[split + 1 :]
    arrays = [_array(entry, buffer, k) for k, entry in enumerate(head["arrays"])]
    try:
        return _Reader(arrays).decode(head.get("tree"), 0)
    except RecursionError:
        raise StateFileError(f"damaged: the tree nests deeper than {MAX_DEPTH}") from None


# ------------------------------------------------------------------------------ writing
def _encode(value: Any, arrays: list[np.ndarray], where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise TypeError(f"{where}: nests deeper than {MAX_DEPTH}")
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int:  # not a subclass (an IntEnum would come back as a plain int)
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {_TAG + "float": repr(value)}
    if isinstance(value, (np.ndarray, np.generic)):
        return _encode_array(value, arrays, where)
    if type(value) in (list, tuple):
        items = [_encode(v, arrays, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return items if type(value) is list else {_TAG + "tuple": items}
    if type(value) is dict:
        pairs = [
            [
                _encode(k, arrays, f"{where} key {k!r}", depth + 1),
                _encode(v, arrays, f"{where}[{k!r}]", depth + 1),
            ]
            for k, v in value.items()
        ]
        return {_TAG + "dict": pairs}
    raise TypeError(
        f"{where}: a {type(value).__qualname__} cannot go into a state file (allowed: None, bool, "
        f"int, float, str, list, tuple, dict, numpy arrays and scalars of numeric dtypes)"
    )


def _encode_array(value: np.ndarray | np.generic, arrays: list[np.ndarray], where: str) -> Any:
    if value.dtype.kind not in _DTYPE_KINDS:
        raise TypeError(
            f"{where}: dtype {value.dtype} cannot go into a state file (allowed: bool, integer "
            f"and floating-point dtypes)"
        )
    arrays.append(np.asarray(value))  # tobytes() writes C order; 0-d stays 0-d
    tag = "array" if isinstance(value, np.ndarray) else "scalar"
    return {_TAG + tag: len(arrays) - 1}


# ------------------------------------------------------------------------------ reading
def _json(raw: bytes, what: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        return json.loads(raw.decode("utf-8"), parse_constant=refuse)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise StateFileError(f"damaged: its {what} is not valid JSON") from None


def _array(entry: Any, buffer: memoryview, k: int) -> np.ndarray:
    """Array ``k`` of the table, copied out of ``buffer`` after every bound is checked."""
    try:
        dtype = np.dtype(str(entry["dtype"]))
        shape = tuple(int(n) for n in entry["shape"])
        offset = int(entry["offset"])
    except (TypeError, KeyError, ValueError):
        raise StateFileError(f"damaged: array {k}'s entry in the table is unreadable") from None
    if dtype.kind not in _DTYPE_KINDS or dtype.hasobject or len(shape) > _MAX_DIMS:
        raise StateFileError(f"damaged: array {k} has dtype {dtype} or {len(shape)} dimensions")
    if any(n < 0 for n in shape) or offset < 0:
        raise StateFileError(f"damaged: array {k} has shape {shape} at offset {offset}")
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes > len(buffer):  # checked before anything is allocated
        raise StateFileError(f"damaged: array {k} ({nbytes} bytes) runs past the payload's end")
    flat = np.frombuffer(buffer, dtype=dtype, count=math.prod(shape), offset=offset)
    return flat.reshape(shape).copy()  # its own writable memory, not a view of the file


class _Reader:
    """Turns the tree's JSON back into values; each stored array is handed out once."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays
        self.used: set[int] = set()

    def decode(self, value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise RecursionError
        if isinstance(value, list):
            return [self.decode(v, depth + 1) for v in value]
        if not isinstance(value, dict):
            return value  # None, bool, int, float, str: JSON's own
        if len(value) != 1:
            raise StateFileError(f"damaged: an object with keys {sorted(value)[:5]} in the tree")
        ((tag, body),) = value.items()
        if tag == _TAG + "dict" and isinstance(body, list) and all(map(_is_pair, body)):
            return {_key(self.decode(k, depth + 1)): self.decode(v, depth + 1) for k, v in body}
        if tag == _TAG + "tuple" and isinstance(body, list):
            return tuple(self.decode(v, depth + 1) for v in body)
        if tag == _TAG + "float" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag in (_TAG + "array", _TAG + "scalar") and self._unused(body):
            array = self.arrays[body]
            if tag == _TAG + "array":
                return array
            if array.ndim == 0:
                return array[()]
        raise StateFileError(f"damaged: {str(value)[:80]} in the tree is not a value it can hold")

    def _unused(self, index: Any) -> bool:
        """Whether ``index`` names a stored array not handed out yet (then it is, now)."""
        if type(index) is not int or not 0 <= index < len(self.arrays) or index in self.used:
            return False
        self.used.add(index)
        return True


def _is_pair(item: Any) -> bool:
    return isinstance(item, list) and len(item) == 2


def _key(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise StateFileError(f"damaged: a dict key of type {type(key).__name__}") from None
    return key
