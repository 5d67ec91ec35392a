"""Hypothesis strategies for train and query replies that break the protocol in every way a
node (faulty or hostile) can: wrong records, arrays, dtypes, shapes, payloads and metrics."""

from __future__ import annotations

import io
import math

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from hypothesis import strategies as st
from numpy.lib import format as npy

from fl_async.protocol import to_record

KEYS = ["w", "count"]
NUMERIC = ["<f4", "<f8", "<f2", ">f4", "<i8", "<i4", "|u1", "|b1"]
OTHER = ["<c8", "|O", "<U3", "|V4", "<M8[s]"]
BAD_COUNTS = [math.nan, math.inf, -math.inf, -1, -0.5, 1.5, 2**53 + 1, 10**18, 10**30]


def _npy(dtype: str, shape: tuple[int, ...], fill: float) -> bytes:
    """A ``.npy`` payload; for a dtype numpy cannot save without pickle, a forged header."""
    out = io.BytesIO()
    if dtype in NUMERIC:
        with np.errstate(all="ignore"):
            np.save(out, np.full(shape, fill).astype(dtype), allow_pickle=False)
    else:
        header = {"descr": dtype, "fortran_order": False, "shape": shape}
        npy.write_array_header_1_0(out, header)
        out.write(b"\0" * 16)
    return out.getvalue()


def _forged_shape(shape: tuple[int, ...]) -> bytes:
    """A header declaring ``shape`` of float64 with 8 bytes of data after it."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False, "shape": shape})
    out.write(b"\0" * 8)
    return out.getvalue()


payloads = st.one_of(
    st.builds(
        _npy,
        st.sampled_from(NUMERIC + OTHER),
        st.lists(st.integers(0, 4), max_size=3).map(tuple),
        st.sampled_from([0.0, 1.0, math.nan, math.inf, -math.inf, 1e30]),
    ),
    st.sampled_from([(10**9,), (10**12,), (2**40, 2**40), (-1,), (3, -2)]).map(_forged_shape),
    st.binary(max_size=200),
    st.just(b"\x93NUMPY\x03\x00" + b"\x10\x00" + b"{}".ljust(16)),
)


@st.composite
def arrays(draw) -> Array:
    """An Array whose payload, declared dtype/shape and serialisation type are arbitrary."""
    stype = draw(st.sampled_from(["numpy.ndarray", "numpy.ndarray", "torch.tensor", "pickle"]))
    return Array(dtype="float32", shape=(5,), stype=stype, data=draw(payloads))


@st.composite
def array_records(draw) -> ArrayRecord:
    record = ArrayRecord()
    for key in draw(st.lists(st.sampled_from([*KEYS, "extra", ""]), max_size=4, unique=True)):
        record[key] = draw(arrays())
    return record


metric_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.sampled_from(BAD_COUNTS),
    st.lists(st.floats(allow_nan=False), max_size=3),
)


@st.composite
def metric_records(draw) -> MetricRecord:
    keys = st.sampled_from(["num-examples", "partition-id", "train-loss", "server-step", "x"])
    return MetricRecord(draw(st.dictionaries(keys, metric_values, max_size=4)))


@st.composite
def contents(draw) -> RecordDict:
    """Any mix of array, metric and config records under the protocol's names or others."""
    content = RecordDict()
    names = st.sampled_from(["arrays", "pseudo-gradient", "metrics", "config", "other"])
    for name in draw(st.lists(names, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["array", "metric", "config"]))
        if kind == "array":
            content[name] = draw(array_records())
        elif kind == "metric":
            content[name] = draw(metric_records())
        else:
            content[name] = ConfigRecord({"note": draw(st.text(max_size=5))})
    return content


def honest_arrays(base: list[np.ndarray]) -> list[np.ndarray]:
    return [base[0] - np.float32(0.01), base[1]]


FLAWS = (
    *("junk", "nan", "inf", "shape", "missing", "extra"),
    *("dtype", "count", "pseudo-nan", "no-model", "two-records"),
)
"""What can be wrong with a train reply: junk, or one flaw in a well-formed one."""


@st.composite
def bad_train_replies(draw):
    """A function of the task's base arrays giving a reply content the server must refuse:
    arbitrary junk, or a well-formed reply with exactly one thing wrong."""
    flaw = draw(st.sampled_from(FLAWS))
    junk = draw(contents())
    count = draw(st.sampled_from(BAD_COUNTS))

    def reply(base: list[np.ndarray]) -> RecordDict:
        if flaw == "junk":  # never a model: no payload has the shape (5,) of ``w``
            return junk
        arrays, metrics = honest_arrays(base), {"num-examples": 10}
        keys, key = list(KEYS), "arrays"
        if flaw in ("nan", "inf", "pseudo-nan"):
            arrays[0] = arrays[0].copy()
            arrays[0][0] = np.inf if flaw == "inf" else np.nan
            key = "pseudo-gradient" if flaw == "pseudo-nan" else key
        elif flaw == "shape":
            arrays[0] = np.zeros(arrays[0].shape + (2,), np.float32)
        elif flaw == "missing":
            arrays, keys = arrays[:1], keys[:1]
        elif flaw == "extra":
            arrays, keys = [*arrays, np.zeros(3, np.float32)], [*keys, "extra"]
        elif flaw == "dtype":
            arrays[0] = arrays[0].astype(np.int32)
        elif flaw == "count":
            metrics = {"num-examples": count}
        content = RecordDict({"metrics": MetricRecord(metrics)})
        if flaw == "two-records":
            content["a"] = to_record(keys, arrays)
            content["b"] = to_record(keys, arrays)
        elif flaw != "no-model":
            content[key] = to_record(keys, arrays)
        return content

    return reply


def reply_to(message: Message, content: RecordDict) -> Message:
    return Message(content, reply_to=message)
