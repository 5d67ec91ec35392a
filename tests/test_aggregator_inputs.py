"""Finiteness of what arrives: delta and base must both be finite, in every rule; a finite update
is never rejected as non-finite, however large (only a step that really overflows is refused)."""

import numpy as np
import pytest
from exact import assert_same
from reference_calls import dcasgd_reference, gsgm_reference

from fl_async.aggregators import (
    AGGREGATORS,
    APPLIED,
    DCASGD,
    GSGM,
    HELD,
    REJECTED,
    ClientUpdate,
    Outcome,
    TrendSmooth,
)
from fl_async.aggregators.kernels import squared_norm

SHAPES = ((4, 3), (5,))


def _state(agg):
    return {k: v for k, v in agg.state_dict().items() if k not in ("num_rejected",)}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_a_non_finite_base_is_rejected_by_every_rule(name, bad):
    rng = np.random.default_rng(0)
    agg = AGGREGATORS[name]()
    params = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    agg.init(params)
    good = ClientUpdate(node_id=0, delta=[p * 0.01 for p in params], base=params, iteration=0)
    assert agg.apply(good).accepted  # accumulators hold something
    before = _state(agg)
    base = [p.copy() for p in params]
    base[1][3] = bad
    bad_update = ClientUpdate(node_id=1, delta=[p * 0.01 for p in params], base=base, iteration=0)
    assert agg.apply(bad_update) == Outcome(REJECTED, "non-finite")
    assert agg.num_rejected == {"non-finite": 1}
    assert_same(_state(agg), before)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_a_finite_base_whose_norm_overflows_is_accepted(name):
    agg = AGGREGATORS[name]()
    params = [np.full(s, 1e20, np.float32) for s in SHAPES]  # ||w_b||^2 is inf in float32
    agg.init(params)
    delta = [np.full(s, 1e-3, np.float32) for s in SHAPES]
    outcome = agg.apply(ClientUpdate(node_id=0, delta=delta, base=params, iteration=0))
    assert outcome.accepted, outcome
    assert all(np.isfinite(p).all() for p in agg.params)


def _huge_update(agg, value=1.5e19):
    """Apply an update whose float32 squared norm overflows though every value is finite."""
    params = [np.ones(s, np.float32) for s in SHAPES]
    agg.init(params)
    delta = [np.full(s, value, np.float32) for s in SHAPES]
    assert np.isinf(squared_norm(delta)) and np.isfinite(delta[0] ** 2).all()
    return params, delta, agg.apply(ClientUpdate(node_id=3, delta=delta, base=params))


def test_gsgm_applies_a_finite_update_whose_norm_overflows():
    agg = GSGM(lr=0.1, momentum=0.9, average_weight=0.5)
    params, delta, outcome = _huge_update(agg)
    assert outcome == Outcome(APPLIED) and agg.num_rejected == {}
    zeros = [np.zeros_like(p) for p in params]
    state = {"w": params, "S": zeros, "u": zeros, "G": {}}
    expected = gsgm_reference(state, 3, delta, 1.0, lr=0.1, momentum=0.9, average_weight=0.5)
    for got, want in zip(agg.params, expected["w"], strict=True):
        np.testing.assert_array_equal(got, want)
    assert agg.num_cached == 1
    # the next update from the same node replaces its cached 1e20s, in place or not
    small = [np.full(s, 1e-3, np.float32) for s in SHAPES]
    assert agg.apply(ClientUpdate(node_id=3, delta=small, base=params)) == Outcome(APPLIED)
    np.testing.assert_array_equal(agg.state_dict()["state"]["cache"][3][0], small[0])


def test_dcasgd_applies_a_finite_update_whose_norm_overflows():
    agg = DCASGD(lr=0.5, lam=0.04)
    params, delta, outcome = _huge_update(agg)
    assert outcome == Outcome(APPLIED) and agg.num_rejected == {}
    expected = dcasgd_reference({"w": params}, delta, params, 1.0, lr=0.5, lam=0.04)
    for got, want in zip(agg.params, expected["w"], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("base", ["sgd", "momentum", "adam"])
def test_trend_smooth_applies_a_finite_update_whose_norm_overflows(base):
    agg = TrendSmooth(lr=0.5, base=base)
    _, _, outcome = _huge_update(agg, value=1.5e19)  # adam squares it: 2.25e38 is finite
    assert outcome == Outcome(APPLIED) and agg.num_rejected == {}
    assert all(np.isfinite(p).all() for p in agg.params)


OVERFLOWING = {
    "gsgm": lambda: GSGM(lr=1.0),
    "dcasgd": DCASGD,
    "dcasgd-adaptive": lambda: DCASGD(adaptive=True),
    "trend-sgd": TrendSmooth,
}


@pytest.mark.parametrize("name", sorted(OVERFLOWING))
def test_a_finite_update_that_really_overflows_is_rejected_as_overflow(name):
    agg = OVERFLOWING[name]()
    params = [np.full(s, 3e38, np.float32) for s in SHAPES]
    agg.init(params)
    before = _state(agg)
    delta = [np.full(s, -3e38, np.float32) for s in SHAPES]
    outcome = agg.apply(ClientUpdate(node_id=0, delta=delta, base=params))
    assert outcome == Outcome(REJECTED, "overflow")
    assert_same(_state(agg), before)


def test_adaptive_dcasgd_rejects_a_mean_square_that_overflows():
    """``delta^2`` of 1e20 is inf in float32: the model would stay finite, M would not."""
    agg = DCASGD(adaptive=True)
    params = [np.ones(s, np.float32) for s in SHAPES]
    agg.init(params)
    delta = [np.full(s, 1e20, np.float32) for s in SHAPES]
    outcome = agg.apply(ClientUpdate(node_id=3, delta=delta, base=params))
    assert outcome == Outcome(REJECTED, "overflow")


def test_a_barrier_holds_a_finite_update_whose_norm_overflows():
    agg = AGGREGATORS["ssgd"]()
    _, delta, outcome = _huge_update(agg)
    assert outcome == Outcome(HELD)
    assert agg.flush()
    np.testing.assert_array_equal(agg.params[0], np.ones((4, 3), np.float32) - delta[0])
