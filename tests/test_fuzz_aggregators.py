"""Every preset's aggregator fed arbitrary updates (Hypothesis): ``apply`` never raises, a
rejected update leaves all state but ``num_rejected`` as it was, bit for bit, and the model
stays finite."""

from __future__ import annotations

import math

import numpy as np
import pytest
from exact import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fl_async.aggregators import ClientUpdate
from fl_async.strategies import PRESETS

MODEL = [np.zeros(5, np.float32), np.array(0, np.int64)]
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.complex64]
COUNTS = [0, 1, 10, 2**53, -1, 1.5, math.nan, True, 10**30]


def _array(shape, dtype) -> st.SearchStrategy:
    return hnp.arrays(dtype, shape, elements=hnp.from_dtype(np.dtype(dtype), allow_nan=True))


honest = st.builds(
    lambda d: [d, np.array(0, np.int64)],
    hnp.arrays(np.float32, 5, elements=st.floats(-1, 1, width=32)),
)
arbitrary = st.lists(
    st.sampled_from(DTYPES).flatmap(
        lambda dt: _array(st.sampled_from([(5,), (), (4,), (5, 1), (0,)]), dt)
    ),
    max_size=3,
)
updates = st.builds(
    lambda delta, node, staleness, count: ClientUpdate(
        node_id=node, delta=delta, staleness=staleness, num_examples=count, iteration=0
    ),
    honest | arbitrary,
    st.integers(0, 3),
    st.sampled_from([0, 1, 3, -1, 10**6]),
    st.sampled_from(COUNTS),
)


def _state(aggregator) -> dict:
    return {k: v for k, v in aggregator.state_dict().items() if k != "num_rejected"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
@settings(max_examples=40, deadline=None)
@given(sequence=st.lists(updates, min_size=1, max_size=8))
def test_every_aggregator_survives_arbitrary_updates(preset, sequence):
    aggregator = PRESETS[preset](min_nodes=4).aggregator
    aggregator.init(MODEL)
    for update in sequence:
        if aggregator.reads_base:  # the loop hands the server's own copy of the base
            update = ClientUpdate(**{**update.__dict__, "base": [p.copy() for p in MODEL]})
        before = _state(aggregator)
        outcome = aggregator.apply(update)
        if not outcome.accepted:
            assert_same(before, _state(aggregator))
        assert all(np.isfinite(p).all() for p in aggregator.params)
        aggregator.flush()  # a barrier rule's step, as the loop takes it once nothing is owed
        assert all(np.isfinite(p).all() for p in aggregator.params)
