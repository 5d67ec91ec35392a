"""State round trips (bit for bit) and property tests over shapes, dtypes, staleness, rejection."""

import pickle

import numpy as np
import pytest
from exact import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.aggregators import (
    APPLIED,
    ASGD,
    CA2FL,
    DCASGD,
    FADAS,
    GSGM,
    HELD,
    MIFA,
    ODSGD,
    SSGD,
    ClientUpdate,
    FedAsync,
    FedBuff,
    Outcome,
    TrendSmooth,
)

BARRIER = 3
"""Barrier rules (SSGD, ODSGD) are flushed once this many updates are held."""

FACTORIES = {
    "ssgd": lambda: SSGD(lr=0.9),
    "odsgd": lambda: ODSGD(lr=0.9),
    "asgd": lambda: ASGD(lr=0.5, staleness="polynomial"),
    "fedasync": lambda: FedAsync(alpha=0.5),
    "fedbuff": lambda: FedBuff(buffer_size=3, server_momentum=0.5),
    "fedbuff-median": lambda: FedBuff(buffer_size=3, server_momentum=0.5, combine="median"),
    "fedbuff-trimmed": lambda: FedBuff(buffer_size=4, combine="trimmed-mean", trim=0.25),
    "ssgd-median": lambda: SSGD(lr=0.9, combine="median"),
    "dcasgd": lambda: DCASGD(lr=0.5, lam=0.1),
    "dcasgd-adaptive": lambda: DCASGD(lr=0.5, adaptive=True),
    "gsgm": lambda: GSGM(staleness="hinge"),
    "trend-sgd": lambda: TrendSmooth(lr=0.5),
    "trend-momentum": lambda: TrendSmooth(lr=0.5, base="momentum"),
    "trend-adam": lambda: TrendSmooth(lr=0.01, base="adam"),
    "mifa": lambda: MIFA(lr=0.5, num_nodes=4),
    "mifa-warmup": lambda: MIFA(num_nodes=2, warmup=True, lr_schedule="inverse"),
    "ca2fl": lambda: CA2FL(buffer_size=3, lr=0.8),
    "fadas": lambda: FADAS(buffer_size=3, lr=0.05, bias_correction=True),
}
SHAPES = ((4, 3), (3,), ())


def _params():
    return [np.linspace(-1, 1, int(np.prod(s)), dtype=np.float32).reshape(s) for s in SHAPES] + [
        np.array(0, dtype=np.int64)
    ]


def _updates(seed, count, num_nodes=3):
    """A deterministic stream of updates, bases taken from a running history of versions."""
    rng = np.random.default_rng(seed)
    return [
        (
            i % num_nodes,
            [rng.normal(scale=0.1, size=s).astype(np.float32) for s in SHAPES]
            + [np.array(-1, dtype=np.int64)],
            int(rng.integers(0, 3)),
        )
        for i in range(count)
    ]


def _feed(agg, stream, history):
    for node, delta, tau in stream:
        if isinstance(agg, SSGD):
            tau = 0  # SSGD drops stale updates; feed it fresh ones
        b = max(len(history) - 1 - tau, 0)
        agg.apply(
            ClientUpdate(
                node_id=node,
                delta=delta,
                base=history[b],
                staleness=len(history) - 1 - b,
                num_examples=node + 1,
                iteration=agg.version,
            )
        )
        if agg.held == BARRIER:
            assert agg.flush()
        if len(history) - 1 < agg.version:
            history.append([p.copy() for p in agg.params])


def _core_state(agg):
    """The state without the counters and the (informational) hyperparameters."""
    skip = ("num_rejected", "hyperparameters")
    return {k: v for k, v in agg.state_dict().items() if k not in skip}


def _assert_same_state(a, b):
    assert_same(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_round_trip_continues_bit_for_bit(name):
    make = FACTORIES[name]
    stream = _updates(seed=7, count=11)
    original = make()
    original.init(_params())
    history = [[p.copy() for p in original.params]]
    _feed(original, stream[:4], history)  # FedBuff/SSGD: mid-buffer
    saved = pickle.loads(pickle.dumps(original.state_dict()))
    resumed = make()
    resumed.load_state_dict(saved)
    _assert_same_state(original, resumed)
    history_copy = [list(h) for h in history]
    _feed(original, stream[4:], history)
    _feed(resumed, stream[4:], history_copy)
    assert original.version == resumed.version > 1
    for a, b in zip(original.params, resumed.params, strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_same_state(original, resumed)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_results_do_not_depend_on_chunk_size_or_threads(name, monkeypatch):
    """Rules run chunk by chunk on a thread pool; every chunking gives the same bits."""
    from fl_async.aggregators import kernels

    def run():
        agg = FACTORIES[name]()
        agg.init(_params())
        _feed(agg, _updates(seed=3, count=9), [[p.copy() for p in agg.params]])
        return agg

    whole = run()  # each of these tiny arrays is one chunk
    monkeypatch.setattr(kernels, "CHUNK", 5)
    monkeypatch.setattr(kernels, "THREADS", 3)
    parts = run()  # the 12-value array in three chunks, three parts run in this thread
    monkeypatch.setattr(kernels, "THREADED_MIN", 0)
    threaded = run()  # the same parts spread over three threads
    for split in (parts, threaded):
        assert split.version == whole.version > 1
        _assert_same_state(whole, split)


def test_a_scratch_buffer_made_under_a_smaller_chunk_is_not_reused(monkeypatch):
    """A thread's scratch buffers made before CHUNK grew are dropped, every one of them: a
    short one among long ones once gave a chunk a buffer shorter than itself."""
    from fl_async.aggregators import kernels

    long, short = np.empty(kernels.CHUNK, np.float32), np.empty(5, np.float32)
    monkeypatch.setattr(kernels._local, "buffers", [long, short], raising=False)
    seen = []
    kernels.run_chunked(
        lambda a, x, y: seen.append((a.size, x.size, y.size)) or 0.0,
        [np.zeros(16, np.float32)],
        scratch=2,
    )
    assert seen == [(16, 16, 16)]


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_is_a_copy(name):
    agg = FACTORIES[name]()
    agg.init(_params())
    history = [[p.copy() for p in agg.params]]
    _feed(agg, _updates(seed=1, count=2), history)
    before = agg.state_dict()
    state = agg.state_dict()
    for p in state["params"]:
        p[...] = 123
    assert_same(agg.state_dict(), before)


def test_load_state_dict_of_another_rule_fails():
    agg = ASGD()
    agg.init(_params())
    with pytest.raises(ValueError, match="state_dict is for 'ASGD', not 'GSGM'"):
        GSGM().load_state_dict(agg.state_dict())


# --------------------------------------------------------------------------------- properties
shapes_st = st.lists(
    st.lists(st.integers(min_value=1, max_value=4), min_size=0, max_size=3).map(tuple),
    min_size=1,
    max_size=4,
)
bad_kinds = st.sampled_from(
    ["nan", "inf", "shape", "count", "dtype", "negative-staleness", "too-stale", "weight", "base"]
)


def _make_bad(kind, delta, base):
    """Return (delta, base, staleness) broken in the way named by ``kind``."""
    delta = [d.copy() for d in delta]
    tau = 1
    if kind in ("nan", "inf"):
        delta[0].reshape(-1)[0] = np.nan if kind == "nan" else -np.inf
    elif kind == "shape":
        delta[0] = np.zeros(delta[0].shape + (2,), np.float32)
    elif kind == "count":
        delta = delta[:-1]
    elif kind == "dtype":
        delta[0] = delta[0].astype(np.complex64)
    elif kind == "negative-staleness":
        tau = -1
    elif kind == "too-stale":
        tau = 5
    elif kind == "base":
        base = [b.copy() for b in base]
        base[0].reshape(-1)[0] = np.inf
    return delta, base, tau


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(FACTORIES)),
    shapes=shapes_st,
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    tau=st.integers(min_value=0, max_value=4),
    kind=bad_kinds,
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_rejection_leaves_every_piece_of_state_unchanged(name, shapes, dtype, tau, kind, seed):
    rng = np.random.default_rng(seed)
    agg = FACTORIES[name]()
    agg.max_staleness = 4
    params = [rng.normal(size=s).astype(np.float32) for s in shapes]
    agg.init(params)
    # A good update first, so accumulators hold something. SSGD rejects stale ones by design.
    good_tau = 0 if isinstance(agg, SSGD) else tau
    good = [rng.normal(scale=0.1, size=s).astype(dtype) for s in shapes]
    first = agg.apply(
        ClientUpdate(
            node_id=0, delta=good, base=params, staleness=good_tau, num_examples=3, iteration=0
        )
    )
    # The buffers (K = 3), the barriers and MIFA's warm-up hold their first update; the other
    # rules step on it
    holds = isinstance(agg, (SSGD, FedBuff, CA2FL, FADAS)) or getattr(agg, "warmup", False)
    assert first == Outcome(HELD if holds else APPLIED)
    assert agg.num_rejected == {}
    before = {
        k: v for k, v in agg.state_dict().items() if k not in ("num_rejected", "hyperparameters")
    }
    rejected_before = sum(agg.num_rejected.values())
    if kind == "weight":
        agg.staleness = lambda t: float("nan")
    delta, base, bad_tau = _make_bad(kind, good, params)
    outcome = agg.apply(
        ClientUpdate(
            node_id=1, delta=delta, base=base, staleness=bad_tau, num_examples=3, iteration=0
        )
    )
    assert not outcome.accepted and outcome.reason in agg.num_rejected
    assert_same(
        {k: v for k, v in agg.state_dict().items() if k not in ("num_rejected", "hyperparameters")},
        before,
    )
    assert sum(agg.num_rejected.values()) == rejected_before + 1


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(FACTORIES)),
    shapes=shapes_st,
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    taus=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_valid_updates_keep_the_model_finite_and_versions_counted(name, shapes, dtype, taus, seed):
    rng = np.random.default_rng(seed)
    agg = FACTORIES[name]()
    agg.init([rng.normal(size=s).astype(np.float32) for s in shapes])
    steps = 0
    for i, tau in enumerate(taus):
        if isinstance(agg, SSGD):
            tau = 0
        delta = [rng.normal(scale=0.1, size=s).astype(dtype) for s in shapes]
        base = [p.copy() for p in agg.params]
        update = ClientUpdate(
            node_id=i, delta=delta, base=base, staleness=tau, num_examples=2, iteration=agg.version
        )
        outcome = agg.apply(update)
        assert outcome.accepted
        steps += outcome.stepped
        assert all(
            p.dtype == np.float32 and p.shape == s for p, s in zip(agg.params, shapes, strict=True)
        )
        assert all(np.isfinite(p).all() for p in agg.params)
    steps += agg.flush()  # a barrier steps with what it holds; other rules hold nothing
    assert agg.version == steps
    assert agg.num_rejected == {}
