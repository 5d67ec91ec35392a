"""The fast kernels against the readable rules they implement, on both branches.

GSGM, DC-ASGD and Trend-Smooth update their state in place when running bounds prove the step
finite, and otherwise compute it into scratch, check it and publish it. Both branches run one
kernel; these tests hold each branch to the plain numpy reference of the rule kept beside it
(``gsgm_reference``, ``dcasgd_reference``, ``trend_smooth_reference``), and the two branches to
each other, bit for bit.
"""

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from reference_calls import dcasgd_reference, gsgm_reference, trend_smooth_reference

from fl_async.aggregators import DCASGD, GSGM, Aggregator, ClientUpdate, TrendSmooth, kernels

SHAPES = ((3, 4), (5,), ())


@dataclass
class Case:
    make: Callable[[], Aggregator]
    start: Callable[[Aggregator], dict[str, Any]]
    """The reference state matching a freshly initialised aggregator."""
    step: Callable[[dict, Aggregator, ClientUpdate, list, float], dict]
    """One reference update: (state, aggregator, update, float32 base, weight) -> state."""
    exact: bool
    scale: float = 0.3
    """Of the deltas: small enough for the running bounds to stay below the in-place limit."""


def _zeros(agg):
    return [np.zeros_like(w) for w in agg.params]


def _model(agg):
    """A copy: the in-place branch overwrites the live arrays."""
    return [w.copy() for w in agg.params]


def _hyper(agg, *names):
    return {name: getattr(agg, name) for name in names}


def _gsgm_step(state, agg, u, base, weight):
    h = _hyper(agg, "lr", "momentum", "average_weight")
    return gsgm_reference(state, u.node_id, list(u.delta), weight, **h)


def _dcasgd_step(state, agg, u, base, weight):
    h = _hyper(agg, "lr", "lam", "adaptive", "lam0", "ms_decay")
    return dcasgd_reference(state, list(u.delta), base, weight, **h)


def _trend_step(state, agg, u, base, weight):
    h = _hyper(agg, "lr", "base", "beta", "beta1", "beta2", "eps", "trend_decay", "shrink")
    return trend_smooth_reference(state, list(u.delta), weight, **h)


def _trend_start(agg):
    return {"w": _model(agg), "T": _zeros(agg), "m": _zeros(agg), "q": _zeros(agg), "t": 0}


CASES = {
    "gsgm": Case(
        lambda: GSGM(lr=0.3, momentum=0.8, average_weight=0.4, staleness="polynomial"),
        lambda agg: {"w": _model(agg), "S": _zeros(agg), "u": _zeros(agg), "G": {}},
        _gsgm_step,
        exact=True,
    ),
    "gsgm-lr1": Case(
        lambda: GSGM(lr=1.0, momentum=0.5, average_weight=1.0, staleness="hinge"),
        lambda agg: {"w": _model(agg), "S": _zeros(agg), "u": _zeros(agg), "G": {}},
        _gsgm_step,
        exact=True,
    ),
    "dcasgd": Case(
        lambda: DCASGD(lr=0.7, lam=0.5, staleness="polynomial"),
        lambda agg: {"w": _model(agg)},
        _dcasgd_step,
        exact=True,
    ),
    "dcasgd-adaptive": Case(
        lambda: DCASGD(lr=0.7, adaptive=True, lam0=0.3, ms_decay=0.9, staleness="polynomial"),
        lambda agg: {"w": _model(agg), "M": _zeros(agg)},
        _dcasgd_step,
        exact=True,
        scale=0.01,  # its bound takes lam_t at its largest, lam0 / sqrt(1e-7)
    ),
    "trend-sgd": Case(lambda: TrendSmooth(lr=0.5, shrink=0.3), _trend_start, _trend_step, False),
    "trend-momentum": Case(
        lambda: TrendSmooth(lr=0.2, base="momentum", beta=0.8, shrink=0.3, staleness="hinge"),
        _trend_start,
        _trend_step,
        exact=False,
    ),
    "trend-adam": Case(
        lambda: TrendSmooth(lr=0.05, base="adam", beta1=0.8, beta2=0.99, shrink=0.3),
        _trend_start,
        _trend_step,
        exact=False,
    ),
}

RTOL, ATOL = 1e-6, 2.5e-7
"""Trend-Smooth's tolerance: about one float32 ulp of values near 1 (1.2e-7 was measured)."""

STATE_KEYS = {"S": "sum", "u": "velocity", "M": "mean_square", "T": "trend", "m": "m", "q": "q"}


def _updates(seed, scale, count=14, num_nodes=4):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        delta = [rng.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]
        yield int(rng.integers(num_nodes)), delta, int(rng.integers(0, 4))


def _run(case, branch, monkeypatch, publishes, seed=0):
    """Feed the same updates to the rule (on ``branch``) and to its reference; compare after
    each update; return the rule."""
    if branch == "scratch":  # no bound is below 0: every step goes through scratch
        monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    rng = np.random.default_rng(seed)
    agg = case.make()
    agg.init([rng.normal(size=s).astype(np.float32) for s in SHAPES])
    state, history = case.start(agg), [[p.copy() for p in agg.params]]
    for count, (node, delta, tau) in enumerate(_updates(seed, case.scale), start=1):
        b = max(len(history) - 1 - tau, 0)
        tau = len(history) - 1 - b
        update = ClientUpdate(node_id=node, delta=delta, base=history[b], staleness=tau)
        weight = agg.staleness(tau)
        assert agg.apply(update).stepped
        state = case.step(state, agg, update, history[b], weight)
        _compare(case, agg, state)
        history.append([p.copy() for p in agg.params])
        assert len(publishes) == (count if branch == "scratch" else 0)
    return agg


def _compare(case, agg, state):
    rule = agg.state_dict()["state"]
    pairs = [(agg.params, state["w"])]
    pairs += [(rule[key], state[name]) for name, key in STATE_KEYS.items() if rule.get(key)]
    if "G" in state:
        assert sorted(rule["cache"]) == sorted(state["G"])
        pairs += [(rule["cache"][k], state["G"][k]) for k in state["G"]]
    for got_arrays, want_arrays in pairs:
        for got, want in zip(got_arrays, want_arrays, strict=True):
            assert got.dtype == want.dtype == np.float32
            if case.exact:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("branch", ["in-place", "scratch"])
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.exact])
def test_kernel_equals_reference_bit_for_bit(name, branch, monkeypatch, publishes):
    """GSGM and DC-ASGD: the reference does the kernel's float32 operations in the kernel's
    order, so every array is equal to the bit."""
    _run(CASES[name], branch, monkeypatch, publishes)


@pytest.mark.parametrize("branch", ["in-place", "scratch"])
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c.exact])
def test_trend_smooth_kernel_equals_reference_to_rounding(name, branch, monkeypatch, publishes):
    """Trend-Smooth: the reference follows the equations (a ``where`` for the shrink, Adam's
    bias corrections as written), while the kernel folds scale factors together; so the
    results agree to float32 rounding (``rtol=1e-6``, ``atol=2.5e-7`` over 14 updates), not to
    the bit."""
    _run(CASES[name], branch, monkeypatch, publishes)


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_branches_agree_bit_for_bit(name, monkeypatch, publishes):
    """The in-place and the scratch branch run one kernel: same state to the bit."""

    def run():
        rng = np.random.default_rng(1)
        agg = CASES[name].make()
        agg.init([rng.normal(size=s).astype(np.float32) for s in SHAPES])
        for node, delta, tau in _updates(seed=1, scale=CASES[name].scale, count=20):
            base = [p.copy() for p in agg.params]
            agg.apply(ClientUpdate(node_id=node, delta=delta, base=base, staleness=tau))
            if node == 3:
                agg.forget(2)
        return agg.state_dict()

    in_place = run()
    assert publishes == []
    monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    scratch = run()
    assert len(publishes) == 20
    assert pickle.dumps(in_place) == pickle.dumps(scratch)
