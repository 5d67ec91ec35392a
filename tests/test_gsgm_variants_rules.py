"""GSGM's variants (docs/algorithms.md, GSGM) on worked examples: what ``server_optimizer``,
``momentum_rule`` and ``schedule="buffer"`` do, step by step, and their equivalences."""

import numpy as np
import pytest
from exact import assert_same
from gsgm_variants import COMMON, SHAPES, _params, feed, stream
from reference_calls import gsgm_reference

from fl_async.aggregators import APPLIED, GSGM, HELD, STEPPED, ClientUpdate, TrendSmooth
from fl_async.aggregators.gsgm import implicit_momentum_beta


# ------------------------------------------------------------------- server optimizer, momentum
def test_explicit_default_keywords_are_the_default_rule():
    runs = []
    for agg in (
        GSGM(**COMMON),
        GSGM(**COMMON, server_optimizer="momentum", momentum_rule="update", schedule="block"),
    ):
        agg.init(_params())
        feed(agg, stream(seed=2), [[p.copy() for p in agg.params]])
        runs.append(agg.state_dict())
    assert_same(runs[0], runs[1])
    assert set(runs[0]["state"]) == {"cache", "sum", "velocity"}  # the default layout


def test_adam_is_trend_smooths_adam_on_the_scheduled_gradient():
    """With ``average_weight=0`` the scheduled gradient is ``s(tau) delta``: GSGM's adam then
    moves the model exactly as Trend-Smooth's adam base without shrinking (``shrink=1``)."""
    gsgm = GSGM(
        server_optimizer="adam",
        lr=0.02,
        average_weight=0.0,
        beta1=0.8,
        beta2=0.99,
        eps=1e-6,
        staleness="polynomial",
    )
    trend = TrendSmooth(
        base="adam", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, shrink=1.0, staleness="polynomial"
    )
    for agg in (gsgm, trend):
        agg.init(_params())
        feed(agg, stream(seed=4), [[p.copy() for p in agg.params]])
    for a, b in zip(gsgm.params, trend.params, strict=True):
        np.testing.assert_array_equal(a, b)
    assert gsgm.state_dict()["state"]["t"] == 24


def test_sgd_is_one_step_of_the_scheduled_gradient():
    agg = GSGM(server_optimizer="sgd", lr=0.5, average_weight=0.5)
    agg.init([np.array([1.0, 2.0], np.float32)])
    agg.apply(ClientUpdate(node_id=0, delta=[np.array([0.5, 1.0], np.float32)]))
    # S = d, n = 1, g = d: w = w - 0.5 d
    np.testing.assert_array_equal(agg.params[0], [0.75, 1.5])
    agg.apply(ClientUpdate(node_id=1, delta=[np.array([1.0, 0.0], np.float32)]))
    # S = [1.5, 1], n = 2, g = 0.5 [1, 0] + 0.5 [0.75, 0.5] = [0.875, 0.25]
    np.testing.assert_allclose(agg.params[0], [0.75 - 0.4375, 1.5 - 0.125])
    assert agg.state_dict()["state"]["velocity"] is None


def test_cycle_momentum_moves_as_fedavgm_per_cycle():
    """``average_weight=0``, ``s = 1``, ``lr = 1``, ``beta = 0.5`` on a scalar: each cycle moves
    ``c + beta * u_prev`` and then ``u <- beta u + c``, FedAvgM's round (``n`` = nodes cached)."""
    agg = GSGM(momentum_rule="cycle", lr=1.0, momentum=0.5, average_weight=0.0)
    agg.init([np.zeros(1, np.float32)])

    def send(node, value):
        agg.apply(ClientUpdate(node_id=node, delta=[np.array([value], np.float32)]))
        rule = agg.state_dict()["state"]
        return float(agg.params[0][0]), float(rule["velocity"][0][0]), rule["cycle_count"]

    assert send(0, 1.0) == (-1.0, 1.0, 0)  # n = 1: the cycle closes at once; u = 0 before
    assert send(1, 2.0) == (-3.0, 1.0, 1)  # n = 2: w - g only
    assert send(0, 1.0) == (-4.5, 3.5, 0)  # closes: w - 0.5 * 1; u = 0.5 * 1 + 3
    # FedAvgM, rounds of sums 1 and 3: v = 1, w = -1; v = 0.5 + 3 = 3.5, w = -4.5
    assert send(1, 0.0) == (-4.5, 3.5, 1)
    agg.forget(0)  # n = 1 <= the cycle's count: the next update closes it
    assert send(1, 1.0) == (-5.5 - 1.75, 0.5 * 3.5 + 1.0, 0)


def test_implicit_momentum_takes_off_what_staleness_implies():
    assert implicit_momentum_beta(0.9, 0.0, 3) == 0.9
    assert implicit_momentum_beta(0.9, 3.0, 3) == pytest.approx(0.4)  # mean 1: mu = 1/2
    assert implicit_momentum_beta(0.5, 9.0, 3) == 0.0  # mean 3: mu = 3/4 > beta

    def run(taus, **kwargs):
        agg = GSGM(**{**COMMON, "momentum": 0.5, **kwargs})
        agg.init(_params())
        for (node, delta, _, _), tau in zip(stream(seed=6), taus, strict=False):
            agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
        return agg

    # every update fresh: beta_t = beta, the "update" rule exactly
    fresh = run([0] * 24, momentum_rule="implicit")
    assert_same(fresh.params, run([0] * 24).params)
    rule = fresh.state_dict()["state"]
    assert (rule["staleness_sum"], rule["staleness_count"]) == (0.0, 24)
    # every update 3 versions old: mu_t = 3/4 >= beta, so beta_t = 0: plain SGD on g
    assert_same(
        run([3] * 24, momentum_rule="implicit").params,
        run([3] * 24, server_optimizer="sgd").params,
    )
    # the mean runs over every update applied so far
    mixed = run([0, 2, 0, 0], momentum_rule="implicit")
    rule = mixed.state_dict()["state"]
    assert (rule["staleness_sum"], rule["staleness_count"]) == (2.0, 4)


# --------------------------------------------------------------------------- buffer schedule
def _vector(value):
    return [np.full(s, value, np.float32) for s in SHAPES]


def test_buffer_holds_a_node_ahead_and_applies_its_mean_when_the_minimum_rises():
    agg = GSGM(schedule="buffer", num_nodes=3, lr=0.5, staleness="polynomial")
    agg.init(_params())
    ref = GSGM(lr=0.5, staleness="polynomial")  # block: the same steps, fed by hand
    ref.init(_params())
    send = lambda a, node, value, tau=0: a.apply(  # noqa: E731
        ClientUpdate(node_id=node, delta=_vector(value), staleness=tau)
    )
    assert send(agg, 0, 1.0).status == APPLIED
    assert send(agg, 0, 2.0, tau=1).status == HELD  # count 1 > min 0 (nodes 1, 2 unseen) + 0
    assert send(agg, 0, 4.0, tau=3).status == HELD
    assert agg.waiting == {0: 2} and agg.version == 1
    assert agg.held == 0 and not agg.flush()  # no barrier: the buffers step by themselves
    assert send(agg, 1, 0.5).status == APPLIED  # node 2 is still unseen: the minimum is 0
    assert send(agg, 2, 0.25).status == STEPPED  # the minimum rises to 1: node 0's turn
    assert agg.waiting == {} and agg.version == 3
    assert agg.applied_counts == {0: 2, 1: 1, 2: 1}
    # the same as node 0, 1, 2 and then node 0's mean (weight: the mean of s(1), s(3))
    for node, value in ((0, 1.0), (1, 0.5), (2, 0.25)):
        send(ref, node, value)
    s = ref.staleness
    state = ref.state_dict()["state"]
    mean = [(a + b) / 2 for a, b in zip(_vector(2.0), _vector(4.0), strict=True)]
    expected = gsgm_reference(
        {"w": ref.params, "S": state["sum"], "u": state["velocity"], "G": state["cache"]},
        0,
        mean,
        (s(1) + s(3)) / 2,
        lr=0.5,
        momentum=0.9,
        average_weight=0.5,
    )
    for got, want in zip(agg.params, expected["w"], strict=True):
        np.testing.assert_array_equal(got, want)


def test_forget_drops_the_held_updates_and_raises_the_minimum():
    agg = GSGM(schedule="buffer", num_nodes=3)
    agg.init(_params())
    send = lambda node: agg.apply(ClientUpdate(node_id=node, delta=_vector(0.1)))  # noqa: E731
    assert [send(k).status for k in (0, 1, 0, 1)] == [APPLIED, APPLIED, HELD, HELD]
    agg.forget(0)  # its held update goes; it leaves the minimum
    assert agg.waiting == {1: 1} and agg.applied_counts == {1: 1}
    agg.forget(2)  # never seen: no longer waited for; the minimum is node 1's count, 1
    # node 1's held update is due; it goes at the next call, after that call's own update
    # (here node 0, back at the minimum: applied at once)
    assert send(0).status == STEPPED
    assert agg.waiting == {} and agg.applied_counts == {0: 2, 1: 2}
    assert agg.version == 3


def test_without_num_nodes_only_the_nodes_seen_count():
    agg = GSGM(schedule="buffer")
    agg.init(_params())
    send = lambda node: agg.apply(ClientUpdate(node_id=node, delta=_vector(0.1)))  # noqa: E731
    assert [send(0).status, send(0).status] == [APPLIED, APPLIED]  # alone: always its turn
    assert send(1).status == APPLIED  # enters at the minimum, 2
    assert agg.applied_counts == {0: 2, 1: 3}
    assert send(1).status == HELD


def test_a_held_update_that_overflows_is_rejected_and_nothing_changes():
    agg = GSGM(schedule="buffer", num_nodes=2)
    agg.init(_params())
    big = [np.full(s, 3e38, np.float32) for s in SHAPES]
    agg.apply(ClientUpdate(node_id=0, delta=_vector(0.1)))
    assert agg.apply(ClientUpdate(node_id=0, delta=big)).status == HELD
    before = agg.state_dict()
    outcome = agg.apply(ClientUpdate(node_id=0, delta=big))  # 3e38 + 3e38 overflows float32
    assert outcome.reason == "overflow" and agg.num_rejected == {"overflow": 1}
    assert_same({**agg.state_dict(), "num_rejected": {}}, before)
