"""One test helper: exact equality of nested state (dicts, lists, arrays), bit for bit."""

from __future__ import annotations

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
