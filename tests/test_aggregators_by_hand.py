"""Each rule against values worked out by hand, its defaults, and bad input."""

import numpy as np
import pytest

from fl_async.aggregators import (
    AGGREGATORS,
    APPLIED,
    ASGD,
    DCASGD,
    GSGM,
    HELD,
    ODSGD,
    REJECTED,
    SSGD,
    STEPPED,
    ClientUpdate,
    Constant,
    FedAsync,
    FedBuff,
    Hinge,
    Outcome,
    Polynomial,
    TrendSmooth,
)
from fl_async.validation import InvalidArgument

W0 = [1.0, 2.0]


def arr(values):
    return np.array(values, dtype=np.float32)


def upd(node, delta, base, staleness, num_examples=1):
    return ClientUpdate(
        node_id=node,
        delta=[arr(delta)],
        base=[arr(base)],
        staleness=staleness,
        num_examples=num_examples,
    )


def run_trace(agg, trace):
    """Apply ``trace`` and return the model after each update (a copy)."""
    agg.init([arr(W0)])
    out = []
    for u in trace:
        agg.apply(u)
        out.append(agg.params[0].copy())
    return out


# The hand trace shared by most rules: node 1, node 2 (one step stale), node 1 again (stale).
def hand_trace(w1):
    return [
        upd(1, [0.5, -1.0], W0, 0),
        upd(2, [1.0, 1.0], W0, 1, num_examples=3),
        upd(1, [-0.5, 0.5], w1, 1),
    ]


def test_staleness_weights():
    assert Constant()(7) == 1.0
    assert Polynomial(a=0.5)(3) == 0.5
    assert Polynomial(a=1.0)(1) == 0.5
    assert Hinge(a=10, b=4)(4) == 1.0
    assert Hinge(a=10, b=4)(5) == pytest.approx(1 / 11)
    assert Hinge(a=10, b=4)(6) == pytest.approx(1 / 21)


def test_asgd_by_hand():
    # s = 1/(1+tau); w1 = w0 - .5*d1; w2 = w1 - .25*d2; w3 = w2 - .25*d3
    got = run_trace(ASGD(lr=0.5, staleness=Polynomial(a=1.0)), hand_trace([0.75, 2.5]))
    np.testing.assert_allclose(got, [[0.75, 2.5], [0.5, 2.25], [0.625, 2.125]])


def test_fedasync_by_hand():
    # a = .5/(1+tau); w <- (1-a) w + a (w_b - d)
    got = run_trace(FedAsync(alpha=0.5, staleness=Polynomial(a=1.0)), hand_trace([0.75, 2.5]))
    np.testing.assert_allclose(got, [[0.75, 2.5], [0.5625, 2.125], [0.734375, 2.09375]])


def test_fedbuff_by_hand():
    agg = FedBuff(buffer_size=2, lr=1.0, server_momentum=0.5, staleness=Polynomial(a=1.0))
    agg.init([arr(W0)])
    assert agg.apply(upd(1, [0.5, -1.0], W0, 0)) == Outcome(HELD)
    assert agg.count == 1 and agg.version == 0
    np.testing.assert_array_equal(agg.params[0], W0)
    # B = [1.5, 0]; m = B/2 = [.75, 0]; w1 = [.25, 2]
    assert agg.apply(upd(2, [1.0, 1.0], W0, 0)) == Outcome(STEPPED)
    np.testing.assert_allclose(agg.params[0], [0.25, 2.0])
    assert agg.apply(upd(1, [-0.5, 0.5], [0.25, 2.0], 0)).status == HELD
    # s(1) = .5: B = [-.5, .5] + .5*[1, -1] = 0; m = .5*[.75, 0]; w2 = [.25 - .375, 2]
    assert agg.apply(upd(2, [1.0, -1.0], W0, 1)).status == STEPPED
    np.testing.assert_allclose(agg.params[0], [-0.125, 2.0])
    assert agg.version == 2 and agg.count == 0


def test_dcasgd_by_hand():
    # w <- w - (d + lam * d*d*(w - w_b)), lam = .5
    got = run_trace(DCASGD(lr=1.0, lam=0.5), hand_trace([0.5, 3.0]))
    np.testing.assert_allclose(got, [[0.5, 3.0], [-0.25, 1.5], [0.34375, 1.1875]])


def test_dcasgd_adaptive_against_formula():
    lam0, m, lr = 2.0, 0.75, 0.5
    agg = DCASGD(lr=lr, adaptive=True, lam0=lam0, ms_decay=m, staleness=Polynomial(a=1.0))
    trace = hand_trace([0.75, 2.5])
    got = run_trace(agg, trace)
    w, ms = np.array(W0), np.zeros(2)
    for u, g in zip(trace, got, strict=True):
        d, b = u.delta[0].astype(float), u.base[0].astype(float)
        ms = m * ms + (1 - m) * d * d
        lam_t = lam0 / np.sqrt(ms + 1e-7)
        w = w - lr / (1 + u.staleness) * (d + lam_t * d * d * (w - b))
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_gsgm_by_hand():
    agg = GSGM(lr=0.5, momentum=0.5, average_weight=0.5)
    got = run_trace(agg, hand_trace([0.75, 2.5]))
    np.testing.assert_allclose(got, [[0.75, 2.5], [0.1875, 2.5], [-0.03125, 2.1875]])
    assert agg.num_cached == 2
    agg.forget(1)  # S = [.5, 1.5] - [-.5, .5] = [1, 1]
    assert agg.num_cached == 1 and agg.version == 3
    # S = [1,1] - [1,1] + 0 = 0; g = 0; u = .5*[.4375, .625]; w4 = w3 - .5*u
    agg.apply(upd(2, [0.0, 0.0], [-0.03125, 2.1875], 0))
    np.testing.assert_allclose(agg.params[0], [-0.140625, 2.03125])


def test_trend_smooth_sgd_by_hand():
    agg = TrendSmooth(lr=1.0, base="sgd", trend_decay=0.5, shrink=0.5)
    got = run_trace(agg, hand_trace([0.5, 3.0]))
    np.testing.assert_allclose(got, [[0.5, 3.0], [-0.5, 2.5], [-0.25, 2.0]])
    np.testing.assert_allclose(agg.state_dict()["state"]["trend"][0], [-0.1875, -0.25])


def test_trend_smooth_momentum_by_hand():
    agg = TrendSmooth(lr=1.0, base="momentum", beta=0.5, trend_decay=0.5, shrink=0.5)
    got = run_trace(agg, hand_trace([0.5, 3.0])[:2])
    np.testing.assert_allclose(got, [[0.5, 3.0], [-0.75, 2.75]])


def test_ssgd_by_hand():
    agg = SSGD(lr=1.0)
    agg.init([arr(W0)])
    assert agg.apply(upd(2, [1.0, 1.0], W0, 0, num_examples=3)) == Outcome(HELD)
    assert agg.apply(upd(1, [0.5, -1.0], W0, 0, num_examples=1)) == Outcome(HELD)
    # (1*[.5, -1] + 3*[1, 1]) / 4 = [.875, .5]
    assert agg.flush()
    np.testing.assert_allclose(agg.params[0], [0.125, 1.5])
    assert agg.apply(upd(1, [9.0, 9.0], W0, 1)) == Outcome(REJECTED, "too-stale")
    assert agg.num_rejected == {"too-stale": 1}
    # every n_k is 0: equal weights
    assert agg.apply(upd(1, [-1.0, 0.0], [0.125, 1.5], 0, num_examples=0)).status == HELD
    assert agg.apply(upd(1, [5.0, 5.0], [0.125, 1.5], 0)) == Outcome(REJECTED, "duplicate")
    assert agg.num_rejected["duplicate"] == 1
    assert agg.apply(upd(2, [1.0, 2.0], [0.125, 1.5], 0, num_examples=0)).status == HELD
    assert agg.flush()
    np.testing.assert_allclose(agg.params[0], [0.125, 0.5])
    assert agg.version == 2


def test_ssgd_flush_steps_with_held_updates():
    agg = SSGD()
    agg.init([arr(W0)])
    assert not agg.flush()
    agg.apply(upd(1, [1.0, 1.0], W0, 0, num_examples=1))
    agg.apply(upd(2, [3.0, 3.0], W0, 0, num_examples=1))
    assert agg.held == 2 and agg.version == 0
    assert agg.flush()
    np.testing.assert_allclose(agg.params[0], [-1.0, 0.0])
    assert agg.held == 0 and agg.version == 1


def test_ssgd_sums_in_node_order_whatever_the_arrival():
    rng = np.random.default_rng(0)
    deltas = {k: [rng.normal(size=1000).astype(np.float32)] for k in range(5)}
    results = []
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        agg = SSGD()
        agg.init([np.zeros(1000, np.float32)])
        for k in order:
            agg.apply(ClientUpdate(node_id=k, delta=deltas[k], base=None, num_examples=k + 1))
        assert agg.flush()
        results.append(agg.params[0].copy())
    np.testing.assert_array_equal(results[0], results[1])


def test_non_float_arrays_take_latest_accepted_value():
    agg = ASGD()
    agg.init([arr(W0), np.array(10, dtype=np.int64)])
    base = [arr(W0), np.array(10, dtype=np.int64)]
    agg.apply(ClientUpdate(node_id=1, delta=[arr([0, 0]), np.array(-3)], base=base))
    assert agg.params[1] == 13 and agg.params[1].dtype == np.int64
    buffered = FedBuff(buffer_size=2)
    buffered.init([arr(W0), np.array(10, dtype=np.int64)])
    buffered.apply(ClientUpdate(node_id=1, delta=[arr([0, 0]), np.array(-3)], base=base))
    assert buffered.params[1] == 10  # not before the step
    buffered.apply(ClientUpdate(node_id=2, delta=[arr([0, 0]), np.array(-5)], base=base))
    assert buffered.params[1] == 15


def test_float64_updates_are_cast():
    agg = ASGD(lr=1.0)
    agg.init([arr(W0)])
    agg.apply(ClientUpdate(node_id=1, delta=[np.array([0.5, 0.5])], base=None))
    assert agg.params[0].dtype == np.float32
    np.testing.assert_allclose(agg.params[0], [0.5, 1.5])


def test_odsgd_buffers_each_iteration_by_hand():
    def it(node, delta, iteration):
        return ClientUpdate(node_id=node, delta=[arr(delta)], base=None, iteration=iteration)

    agg = ODSGD(lr=1.0)
    agg.init([arr(W0)])
    assert agg.apply(it(1, [1.0, 1.0], 0)) == Outcome(HELD)
    assert agg.apply(it(1, [2.0, 2.0], 1)) == Outcome(HELD)  # the fast node runs ahead
    assert agg.pending_iterations == [1] and agg.held == 1
    assert agg.apply(it(2, [3.0, 3.0], 0)) == Outcome(HELD)
    assert agg.flush()  # mean [2, 2]
    np.testing.assert_allclose(agg.params[0], [-1.0, 0.0])
    assert agg.held == 1 and agg.pending_iterations == []
    assert agg.apply(it(2, [0.0, 0.0], 1)) == Outcome(HELD)
    assert agg.flush()  # mean [1, 1]
    np.testing.assert_allclose(agg.params[0], [-2.0, -1.0])
    assert agg.apply(it(1, [5.0, 5.0], 0)) == Outcome(REJECTED, "too-stale")
    assert agg.apply(it(1, [5.0, 5.0], None)) == Outcome(REJECTED, "missing-iteration")
    assert agg.num_rejected == {"too-stale": 1, "missing-iteration": 1}


# ---------------------------------------------------------------------------- defaults, errors
def test_aggregator_defaults():
    g = GSGM()
    assert (g.lr, g.momentum, g.average_weight) == (0.1, 0.9, 0.5)
    assert g.staleness == Constant()
    f = FedAsync()
    assert f.alpha == 0.6 and f.staleness == Polynomial(a=0.5)
    b = FedBuff()
    assert (b.buffer_size, b.lr, b.server_momentum) == (10, 1.0, 0.0)
    assert b.staleness == Polynomial(a=0.5)
    d = DCASGD()
    assert (d.lr, d.lam, d.adaptive, d.lam0, d.ms_decay) == (1.0, 0.04, False, 2.0, 0.95)
    t = TrendSmooth()
    assert (t.lr, t.base, t.beta, t.trend_decay, t.shrink) == (1.0, "sgd", 0.9, 0.9, 0.5)
    assert (t.beta1, t.beta2, t.eps) == (0.9, 0.999, 1e-8)
    assert ASGD().lr == 1.0 and ASGD().staleness == Constant()
    assert SSGD().lr == 1.0
    assert all(cls().max_staleness is None for cls in AGGREGATORS.values() if cls is not SSGD)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ASGD(lr=-1.0), "lr must be a finite number >= 0, got -1.0"),
        (lambda: ASGD(lr=float("nan")), "lr must be a finite number >= 0, got nan"),
        (lambda: GSGM(momentum=1.0), "momentum must be a finite number in [0, 1), got 1.0"),
        (lambda: GSGM(average_weight=1.5), "average_weight must be a finite number in [0, 1]"),
        (lambda: FedBuff(buffer_size=0), "buffer_size must be an integer >= 1, got 0"),
        (lambda: FedBuff(buffer_size=2.0), "buffer_size must be an integer >= 1, got 2.0"),
        (
            lambda: TrendSmooth(base="rmsprop"),
            "base must be one of 'sgd', 'momentum', 'adam', got 'rmsprop'",
        ),
        (lambda: TrendSmooth(eps=0.0), "eps must be a finite number > 0, got 0.0"),
        (lambda: FedAsync(alpha=0), "alpha must be a finite number in (0, 1], got 0"),
        (lambda: ASGD(max_staleness=-2), "max_staleness must be an integer >= 0 or None, got -2"),
        (
            lambda: ASGD(staleness="linear"),
            "staleness must be one of 'constant', 'polynomial', 'hinge', got 'linear'",
        ),
        (lambda: ASGD(staleness=3), "staleness must be a callable tau -> float or one of"),
        (lambda: Polynomial(a=-1), "Polynomial a must be a finite number >= 0, got -1"),
        (lambda: Hinge(b=1.5), "Hinge b must be an integer >= 0, got 1.5"),
        (lambda: DCASGD(ms_decay=1.0), "ms_decay must be a finite number in [0, 1), got 1.0"),
        (lambda: DCASGD(adaptive=1), "adaptive must be True or False, got 1"),
    ],
)
def test_bad_hyperparameters_raise(make, message):
    with pytest.raises(InvalidArgument) as info:
        make()
    assert message in str(info.value)


def test_barrier_rules_take_no_node_count():
    for cls in (SSGD, ODSGD):
        with pytest.raises(TypeError, match="num_nodes"):
            cls(num_nodes=2)


def test_apply_before_init_raises():
    with pytest.raises(RuntimeError, match="init"):
        ASGD().apply(upd(1, [1.0, 1.0], W0, 0))


def test_overflow_is_rejected_and_model_untouched():
    agg = ASGD(lr=1.0)
    agg.init([arr([3e38, 1.0])])
    assert agg.apply(upd(1, [-3e38, 0.0], [3e38, 1.0], 0)) == Outcome(REJECTED, "overflow")
    assert agg.num_rejected == {"overflow": 1}
    np.testing.assert_array_equal(agg.params[0], arr([3e38, 1.0]))
    assert agg.version == 0


def test_max_staleness_rejects():
    agg = GSGM(max_staleness=2)
    agg.init([arr(W0)])
    assert agg.apply(upd(1, [1.0, 1.0], W0, 3)) == Outcome(REJECTED, "too-stale")
    assert agg.num_rejected == {"too-stale": 1} and agg.num_cached == 0
    assert agg.apply(upd(1, [1.0, 1.0], W0, 2)) == Outcome(APPLIED)


def test_rules_that_read_the_base_reject_updates_without_one():
    for agg in (FedAsync(), DCASGD()):
        agg.init([arr(W0)])
        outcome = agg.apply(ClientUpdate(node_id=1, delta=[arr([1, 1])], base=None))
        assert outcome == Outcome(REJECTED, "missing-base")
        assert agg.num_rejected == {"missing-base": 1}


def test_init_rejects_unsupported_dtypes():
    with pytest.raises(TypeError, match="params\\[0\\] has dtype bool"):
        ASGD().init([np.array([True])])
