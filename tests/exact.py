"""Test helpers: exact equality of nested state (dicts, lists, arrays), bit for bit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def assert_same(a: Any, b: Any) -> None:
    """Exact equality of nested state: same keys (in order), types, dtypes, shapes and bits."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a == b


def assert_identical(a: Any, b: Any, where: str = "tree") -> None:
    """``a`` and ``b`` are the same tree: same types everywhere, arrays equal bit for bit."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, (np.ndarray, np.generic)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert type(key) is type(next(k for k in b if k == key)), f"{where} key {key!r}"
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where
        if isinstance(a, float):
            assert math.copysign(1.0, a) == math.copysign(1.0, b), where  # -0.0 stays -0.0
