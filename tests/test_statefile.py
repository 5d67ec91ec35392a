"""State files: every value a checkpoint holds comes back with its type, dtype, shape and bits;
anything that is not an intact state file is refused with a ``StateFileError``, never run."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
import pytest
from exact import assert_identical
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fl_async import statefile
from fl_async.statefile import MAGIC, StateFileError, dumps, loads

DTYPES = (np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16)


def test_every_kind_of_value_a_run_state_holds_round_trips() -> None:
    tree = {
        "version": 7,
        "lr": 0.1,
        "best": float("inf"),
        "worst": -math.inf,
        "gap": math.nan,
        "zero": -0.0,
        "name": "gsgm",
        "none": None,
        "on": True,
        "big": 2**70,
        "clock": {0: 1.5, 3: 2.25, -1: 0.0},
        "pairs": [(1, 2.0), (3, None)],
        "arrays": [np.arange(6).reshape(2, 3).astype(dt) for dt in DTYPES],
        "scalars": [np.float32(1.25), np.float64(-2.5), np.int64(-3), np.bool_(True)],
        "zero-d": np.array(3.5),
        "empty": [],
        "empty-array": np.zeros((0, 4), np.float32),
        "empty-dict": {},
        "nested": {1: {2: {3: [np.ones(2, np.float64)]}}},
        "keys": {(1, 2): "tuple key", 2.5: "float key", None: "none key", False: "bool key"},
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "big-endian": np.arange(3, dtype=">f8"),
    }
    back = loads(dumps(tree))
    assert_identical(tree, back)
    assert all(a.flags.writeable and a.flags.owndata for a in back["arrays"])


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    | hnp.from_dtype(np.dtype(np.float32)).map(np.float32),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.integers() | st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(values)
def test_any_tree_of_allowed_values_round_trips_exactly(tree: Any) -> None:
    assert_identical(tree, loads(dumps(tree)))


@pytest.mark.parametrize(
    "value, named",
    [
        ({1, 2}, "set"),
        (np.array(["a"]), "dtype <U1"),
        (np.array([object()]), "dtype object"),
        (np.array([1 + 2j]), "dtype complex128"),
        (b"bytes", "bytes"),
    ],
)
def test_a_value_it_cannot_hold_is_refused_by_name_when_written(value: Any, named: str) -> None:
    with pytest.raises(TypeError, match=rf"tree\['x'\]\[0\]: .*{named}"):
        dumps({"x": [value]})


def _rewrap(payload: bytes) -> bytes:
    """``payload`` in a state file with a correct manifest (what a careful forger writes)."""
    manifest = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return MAGIC + json.dumps(manifest).encode() + b"\n" + payload


GOOD = dumps({"w": [np.arange(4, dtype=np.float32)], "step": 3})
PAYLOAD = GOOD[GOOD.index(b"\n", len(MAGIC)) + 1 :]


@pytest.mark.parametrize(
    "data, says",
    [
        (b"", "not an fl-async state file"),
        (b"\x80\x04\x95 pickle", "not an fl-async state file"),
        (b'{"some": "json"}', "not an fl-async state file"),
        (GOOD[:-3], "truncated"),
        (GOOD + b"\0", "truncated or padded"),
        (GOOD[:-1] + bytes([GOOD[-1] ^ 1]), "SHA-256 does not match"),
        (MAGIC + b"not json\n", "manifest is not valid JSON"),
        (MAGIC + b'{"bytes": "many"}\n', "manifest line does not give"),
        (_rewrap(b"[1,2]\n"), "does not start with a tree"),
        (_rewrap(b'{"arrays":[],"tree":{"$array":0}}\n'), "not a value it can hold"),
        (_rewrap(b'{"arrays":[],"tree":{"$eval":"x"}}\n'), "not a value it can hold"),
        (_rewrap(b'{"arrays":[],"tree":{"a":1,"b":2}}\n'), "object with keys"),
        (_rewrap(b'{"arrays":[],"tree":NaN}\n'), "tree is not valid JSON"),
        (_rewrap(b'{"arrays":[],"tree":' + b"[" * 5000 + b"]" * 5000 + b"}\n"), "JSON|deeper"),
        (_rewrap(b'{"arrays":[{"dtype":"|O","shape":[1],"offset":0}],"tree":0}\n'), "dtype"),
        (_rewrap(b'{"arrays":[{"dtype":"<f4","shape":[-1],"offset":0}],"tree":0}\n'), "shape"),
        (
            _rewrap(b'{"arrays":[{"dtype":"<f4","shape":[1000000000],"offset":0}],"tree":0}\n'),
            "runs past the payload's end",
        ),
        (_rewrap(b'{"arrays":[{"dtype":"<f4"}],"tree":0}\n'), "unreadable"),
        (_rewrap(PAYLOAD.replace(b'"step"', b'"\xff"')), "tree is not valid JSON"),
    ],
)
def test_what_is_not_an_intact_state_file_is_refused_saying_why(data: bytes, says: str) -> None:
    with pytest.raises(StateFileError, match=says):
        loads(data)


def test_an_array_named_twice_in_a_forged_tree_is_refused() -> None:
    forged = _rewrap(
        b'{"arrays":[{"dtype":"<f4","shape":[2],"offset":0}],'
        b'"tree":[{"$array":0},{"$array":0}]}\n' + bytes(8)
    )
    with pytest.raises(StateFileError, match="not a value it can hold"):
        loads(forged)


def test_an_unhashable_key_in_a_forged_tree_is_refused() -> None:
    forged = _rewrap(b'{"arrays":[],"tree":{"$dict":[[[1,2],3]]}}\n')
    with pytest.raises(StateFileError, match="dict key of type list"):
        loads(forged)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.integers(0, len(GOOD) - 1))
def test_random_bytes_and_damaged_files_raise_only_state_file_errors(junk, cut) -> None:
    for data in (junk, MAGIC + junk, GOOD[:cut] + junk, _rewrap(junk)):
        try:
            loads(data)
        except StateFileError:
            pass


def test_a_deep_tree_is_refused_when_written() -> None:
    tree: list[Any] = []
    for _ in range(statefile.MAX_DEPTH + 5):
        tree = [tree]
    with pytest.raises(TypeError, match="nests deeper"):
        dumps(tree)
