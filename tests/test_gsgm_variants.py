"""GSGM's variants (docs/algorithms.md, GSGM): ``server_optimizer``, ``momentum_rule`` and
``schedule="buffer"``, each against a readable reference, on both branches (in place and
through scratch), bit for bit, and through ``state_dict()`` / ``load_state_dict()``."""

import pickle

import numpy as np
import pytest
from exact import assert_same
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async.aggregators import (
    APPLIED,
    GSGM,
    HELD,
    STEPPED,
    ClientUpdate,
    TrendSmooth,
    kernels,
)
from fl_async.aggregators.gsgm import (
    gsgm_reference,
    gsgm_variant_reference,
    implicit_momentum_beta,
)
from fl_async.scheduling import Asynchronous, VirtualClock, WhiteList
from fl_async.strategies import GSGM as GSGMPreset
from fl_async.validation import InvalidArgument

SHAPES = ((3, 4), (5,), ())
COMMON = {"lr": 0.3, "momentum": 0.8, "average_weight": 0.4, "staleness": "polynomial"}
VARIANTS = {
    "update": {},
    "sgd": {"server_optimizer": "sgd"},
    "adam": {"server_optimizer": "adam", "lr": 0.05, "beta1": 0.8, "beta2": 0.99},
    "cycle": {"momentum_rule": "cycle"},
    "implicit": {"momentum_rule": "implicit"},
    "cycle-lr1": {"momentum_rule": "cycle", "lr": 1.0, "momentum": 0.5},
    "sgd-lr1": {"server_optimizer": "sgd", "lr": 1.0, "staleness": "hinge"},
}
RULE_KEYS = ("server_optimizer", "momentum_rule", "beta1", "beta2", "eps")
STATE_KEYS = {"S": "sum", "u": "velocity", "m": "m", "q": "q", "c": "cycle_sum"}
COUNTERS = {
    "t": "t",
    "j": "cycle_count",
    "tau_sum": "staleness_sum",
    "tau_count": "staleness_count",
}


def make(name, **extra):
    return GSGM(**{**COMMON, **VARIANTS[name], **extra})


def _zeros():
    return [np.zeros(s, np.float32) for s in SHAPES]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def start_state(agg):
    """The reference state matching a freshly initialised aggregator."""
    return {"w": [p.copy() for p in agg.params], "S": _zeros(), "G": {}, "u": _zeros(),
            "c": _zeros(), "j": 0, "tau_sum": 0.0, "tau_count": 0, "m": _zeros(), "q": _zeros(),
            "t": 0}  # fmt: skip


def reference_step(agg, state, node, delta, weight, staleness):
    rules = {k: getattr(agg, k) for k in ("lr", "momentum", "average_weight", *RULE_KEYS)}
    return gsgm_variant_reference(state, node, delta, weight, staleness, **rules)


def reference_forget(state, node):
    """``S <- S - G[k]``; ``G[k]`` deleted."""
    if node not in state["G"]:
        return state
    S = [s - g for s, g in zip(state["S"], state["G"][node], strict=True)]
    return {**state, "S": S, "G": {k: g for k, g in state["G"].items() if k != node}}


def compare(agg, state):
    """Every array and counter of ``agg`` equals the reference ``state``, bit for bit."""
    rule = agg.state_dict()["state"]
    pairs = [(agg.params, state["w"])]
    pairs += [(rule[key], state[name]) for name, key in STATE_KEYS.items() if rule.get(key)]
    assert sorted(rule["cache"]) == sorted(state["G"])
    pairs += [(rule["cache"][k], state["G"][k]) for k in state["G"]]
    for got_arrays, want_arrays in pairs:
        for got, want in zip(got_arrays, want_arrays, strict=True):
            assert got.dtype == want.dtype == np.float32
            np.testing.assert_array_equal(got, want)
    for name, key in COUNTERS.items():
        if key in rule:
            assert rule[key] == state[name], key


def stream(seed, count=24, num_nodes=4, scale=0.3, p=None):
    """``(node, delta, tau, forget)`` tuples: a node's update, then maybe a node to forget."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        node = int(rng.choice(num_nodes, p=p))
        delta = [rng.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]
        forget = int(rng.integers(num_nodes)) if rng.random() < 0.1 else None
        yield node, delta, int(rng.integers(0, 4)), forget


@pytest.fixture(params=["in-place", "scratch"])
def branch(request, monkeypatch, publishes):
    """Count the scratch branch's publications; on "scratch" every step goes through it."""
    calls = publishes
    if request.param == "scratch":  # no bound is below 0
        monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    return request.param, calls


def feed(agg, updates, history, on_step=None):
    """Apply ``updates`` with bases from ``history`` (list of model versions); return outcomes."""
    outcomes = []
    for node, delta, tau, forget in updates:
        b = max(len(history) - 1 - tau, 0)
        tau = len(history) - 1 - b
        update = ClientUpdate(node_id=node, delta=delta, base=history[b], staleness=tau)
        outcome = agg.apply(update)
        outcomes.append(outcome.status)
        if on_step is not None:
            on_step(node, delta, agg.staleness(tau), tau, forget, outcome.status)
        if forget is not None:
            agg.forget(forget)
        if outcome.stepped:
            history.append([p.copy() for p in agg.params])
    return outcomes


# ------------------------------------------------------------------- server optimizer, momentum
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_kernel_equals_reference_bit_for_bit(name, branch):
    kind, publishes = branch
    agg = make(name)
    agg.init(_params())
    state = {"s": start_state(agg)}

    def check(node, delta, weight, tau, forget, status):
        assert status == APPLIED
        state["s"] = reference_step(agg, state["s"], node, delta, weight, tau)
        compare(agg, state["s"])
        if forget is not None:
            state["s"] = reference_forget(state["s"], forget)

    feed(agg, stream(seed=3), [[p.copy() for p in agg.params]], on_step=check)
    assert agg.version == 24
    assert (len(publishes) == 24) if kind == "scratch" else (publishes == [])


def test_the_variant_reference_with_the_defaults_is_gsgm_reference():
    rng = np.random.default_rng(5)
    state = {"w": _params(), "S": _zeros(), "u": _zeros(), "G": {}}
    variant = dict(state)
    hyper = {"lr": 0.3, "momentum": 0.8, "average_weight": 0.4}
    for node, delta, tau, _ in stream(seed=5, count=10):
        weight = float(rng.uniform(0.2, 1.0))
        state = gsgm_reference(state, node, delta, weight, **hyper)
        variant = gsgm_variant_reference(variant, node, delta, weight, tau, **hyper)
        for name in ("w", "S", "u"):
            for a, b in zip(state[name], variant[name], strict=True):
                np.testing.assert_array_equal(a, b)


def test_explicit_default_keywords_are_the_default_rule():
    runs = []
    for agg in (GSGM(**COMMON), GSGM(**COMMON, server_optimizer="momentum", momentum_rule="update",
                                     schedule="block")):  # fmt: skip
        agg.init(_params())
        feed(agg, stream(seed=2), [[p.copy() for p in agg.params]])
        runs.append(agg.state_dict())
    assert_same(runs[0], runs[1])
    assert set(runs[0]["state"]) == {"cache", "sum", "velocity"}  # the default layout


def test_adam_is_trend_smooths_adam_on_the_scheduled_gradient():
    """With ``average_weight=0`` the scheduled gradient is ``s(tau) delta``: GSGM's adam then
    moves the model exactly as Trend-Smooth's adam base without shrinking (``shrink=1``)."""
    gsgm = GSGM(server_optimizer="adam", lr=0.02, average_weight=0.0, beta1=0.8, beta2=0.99,
                eps=1e-6, staleness="polynomial")  # fmt: skip
    trend = TrendSmooth(base="adam", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, shrink=1.0,
                        staleness="polynomial")  # fmt: skip
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
class BufferedReference:
    """``schedule="buffer"`` as docs/algorithms.md (GSGM) states it, over the per-update
    reference: counts of applied updates, held lists, the plain mean at release."""

    def __init__(self, agg, num_nodes, slack):
        self.agg, self.num_nodes, self.slack = agg, num_nodes, slack
        self.state = start_state(agg)
        self.counts, self.known, self.waiting = {}, set(), {}

    def minimum(self):
        if (self.num_nodes is not None and len(self.known) < self.num_nodes) or not self.counts:
            return 0
        return min(self.counts.values())

    def apply(self, node, delta, weight, tau):
        count = self.counts.get(node, self.minimum())
        if node in self.waiting or count > self.minimum() + self.slack:
            self.waiting.setdefault(node, []).append((delta, weight, tau))
            status = HELD
        else:
            self.state = reference_step(self.agg, self.state, node, delta, weight, tau)
            count += 1
            status = APPLIED
        self.counts[node], released = count, False
        self.known.add(node)
        limit = self.minimum() + self.slack
        for k in sorted(self.waiting):
            if self.counts[k] <= limit:
                held = self.waiting.pop(k)
                total = [d.copy() for d in held[0][0]]
                for d, _, _ in held[1:]:
                    total = [t + x for t, x in zip(total, d, strict=True)]
                mean = [t / len(held) for t in total]
                weight = sum(w for _, w, _ in held) / len(held)
                tau = sum(t for _, _, t in held) / len(held)
                self.state = reference_step(self.agg, self.state, k, mean, weight, tau)
                self.counts[k] += 1
                released = True
        return STEPPED if released else status

    def forget(self, node):
        self.state = reference_forget(self.state, node)
        self.counts.pop(node, None)
        self.waiting.pop(node, None)
        self.known.add(node)


SKEWED = [0.45, 0.3, 0.15, 0.1]
"""Node 0 reports most often: it runs ahead and waits."""


@pytest.mark.parametrize(
    ("name", "slack", "num_nodes"),
    [("update", 0, 4), ("update", 1, 4), ("update", 0, None), ("cycle", 0, 4),
     ("implicit", 1, 4), ("adam", 0, 4), ("sgd", 2, 4)],
)  # fmt: skip
def test_buffer_schedule_equals_reference_bit_for_bit(name, slack, num_nodes, branch):
    agg = make(name, schedule="buffer", slack=slack, num_nodes=num_nodes)
    agg.init(_params())
    ref = BufferedReference(agg, num_nodes, slack)
    statuses = []

    def check(node, delta, weight, tau, forget, status):
        statuses.append(status)
        assert status == ref.apply(node, delta, weight, tau)
        compare(agg, ref.state)
        assert agg.applied_counts == dict(sorted(ref.counts.items()))
        assert agg.waiting == {k: len(v) for k, v in sorted(ref.waiting.items())}
        if forget is not None:
            ref.forget(forget)

    feed(agg, stream(seed=11, count=40, p=SKEWED), [[p.copy() for p in agg.params]], check)
    assert HELD in statuses and STEPPED in statuses  # the stream exercises both
    assert agg.version == sum(s != HELD for s in statuses)
    counts = agg.applied_counts
    assert max(counts.values()) - min(counts.values()) <= slack + 1


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
    expected = gsgm_reference({"w": ref.params, "S": state["sum"], "u": state["velocity"],
                               "G": state["cache"]}, 0, mean, (s(1) + s(3)) / 2,
                              lr=0.5, momentum=0.9, average_weight=0.5)  # fmt: skip
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


# ------------------------------------------------------------------------------ state round trip
ROUND_TRIPS = {
    **{name: {} for name in VARIANTS},
    "buffer": {"schedule": "buffer", "num_nodes": 4},
    "buffer-cycle": {"schedule": "buffer", "num_nodes": 4, "slack": 1, "momentum_rule": "cycle"},
    "buffer-adam": {"schedule": "buffer", "num_nodes": 4, "server_optimizer": "adam"},
    "buffer-implicit": {"schedule": "buffer", "num_nodes": 4, "momentum_rule": "implicit"},
}


def _make_round_trip(name):
    base = name if name in VARIANTS else "update"
    return make(base, **ROUND_TRIPS[name])


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_state_dict_round_trip_continues_bit_for_bit(name):
    updates = list(stream(seed=9, count=30, p=SKEWED))
    whole = _make_round_trip(name)
    whole.init(_params())
    history = [[p.copy() for p in whole.params]]
    feed(whole, updates, history)

    first = _make_round_trip(name)
    first.init(_params())
    history = [[p.copy() for p in first.params]]
    feed(first, updates[:15], history)
    saved = pickle.loads(pickle.dumps(first.state_dict()))  # as a checkpoint keeps it
    if name.startswith("buffer"):
        assert saved["state"]["waiting"], "stopped while an update is held"
    resumed = _make_round_trip(name)
    resumed.load_state_dict(saved)
    feed(resumed, updates[15:], history)
    assert_same(resumed.state_dict(), whole.state_dict())


def test_a_state_dict_of_another_variant_is_refused():
    agg = GSGM(server_optimizer="sgd")
    agg.init(_params())
    for other in (GSGM(), GSGM(server_optimizer="adam"), GSGM(momentum_rule="cycle"),
                  GSGM(momentum_rule="implicit"), GSGM(schedule="buffer")):  # fmt: skip
        with pytest.raises(ValueError, match="does not match server_optimizer"):
            other.load_state_dict(agg.state_dict())


# ---------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"server_optimizer": "nadam"},
         "server_optimizer must be one of 'sgd', 'momentum', 'adam', got 'nadam'"),
        ({"momentum_rule": "nesterov"},
         "momentum_rule must be one of 'update', 'cycle', 'implicit', got 'nesterov'"),
        ({"server_optimizer": "sgd", "momentum_rule": "cycle"},
         "momentum_rule='cycle' needs server_optimizer='momentum', got server_optimizer='sgd'"),
        ({"server_optimizer": "adam", "momentum_rule": "implicit"},
         "momentum_rule='implicit' needs server_optimizer='momentum', got server_optimizer="),
        ({"schedule": "wait"}, "schedule must be one of 'block', 'buffer', got 'wait'"),
        ({"slack": -1}, "slack must be an integer >= 0, got -1"),
        ({"num_nodes": 0}, "num_nodes must be an integer >= 1 or None, got 0"),
        ({"beta1": 1.0}, "beta1 must be a finite number in [0, 1), got 1.0"),
        ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_value_and_what_is_allowed(kwargs, message):
    with pytest.raises(InvalidArgument) as err:
        GSGM(**kwargs)
    assert message in str(err.value)


# ------------------------------------------------------------------------------------ presets
def _resolve(strategy, num_nodes):
    """Resolve the preset's "auto" settings as ``start()`` does."""
    for owner, name, rule in strategy._auto:
        setattr(owner, name, rule(num_nodes))
    return strategy.aggregator


def test_preset_defaults_dispatch_with_the_white_list_and_keep_the_rule():
    preset = GSGMPreset()
    assert type(preset.policy) is WhiteList and preset.policy.staleness_bound == 0
    agg = _resolve(preset, 10)
    assert agg.lr == pytest.approx(0.01) and agg.num_nodes is None
    assert (agg.server_optimizer, agg.momentum_rule, agg.schedule) == ("momentum", "update",
                                                                       "block")  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "lr"),
    [({"server_optimizer": "sgd"}, 0.1), ({"server_optimizer": "adam"}, 0.01),
     ({"momentum_rule": "cycle", "momentum": 0.5}, 0.05), ({"momentum_rule": "implicit"}, 0.01)],
)  # fmt: skip
def test_preset_auto_lr_follows_the_server_optimizer(kwargs, lr):
    assert _resolve(GSGMPreset(**kwargs), 10).lr == pytest.approx(lr)
    assert _resolve(GSGMPreset(lr=0.2, **kwargs), 10).lr == 0.2


def test_preset_buffer_schedule_dispatches_asynchronously_and_knows_n():
    preset = GSGMPreset(schedule="buffer", slack=2)
    assert type(preset.policy) is Asynchronous
    agg = _resolve(preset, 7)
    assert (agg.schedule, agg.slack, agg.num_nodes) == ("buffer", 2, 7)
    with pytest.raises(InvalidArgument, match="momentum_rule='cycle' needs"):
        GSGMPreset(server_optimizer="adam", momentum_rule="cycle")


def test_run_config_keys_reach_the_preset():
    from fl_async.app import server_app
    from fl_async.app.config import parse_run_config

    config = parse_run_config(
        {"strategy": "gsgm", "gsgm.server-optimizer": "adam", "gsgm.beta1": 0.8,
         "gsgm.beta2": 0.99, "gsgm.eps": 1e-6, "gsgm.schedule": "buffer", "gsgm.slack": 1}
    )  # fmt: skip
    agg = server_app.build_strategy(config, clock=None).aggregator
    assert (agg.server_optimizer, agg.beta1, agg.beta2, agg.eps) == ("adam", 0.8, 0.99, 1e-6)
    assert (agg.schedule, agg.slack) == ("buffer", 1)
    config = parse_run_config({"strategy": "gsgm", "gsgm.momentum-rule": "cycle"})
    assert server_app.build_strategy(config, clock=None).aggregator.momentum_rule == "cycle"
    with pytest.raises(ValueError, match="'gsgm': server_optimizer must be one of 'sgd'"):
        server_app.build_strategy(
            parse_run_config({"strategy": "gsgm", "gsgm.server-optimizer": "nadam"}), clock=None
        )


# ---------------------------------------------------------------------------- the event loop
def _run(strategy, nodes, num_rounds=4):
    with task_identity():
        return strategy.start(
            FakeGrid(nodes, delay_seed=0),
            initial_arrays(),
            num_rounds=num_rounds,
            timeout=5,
            train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}),
        )


@pytest.mark.parametrize("slack", [0, 2])
def test_buffer_schedule_in_the_loop_never_blocks_and_keeps_applied_counts_even(slack):
    nodes = quadratic_fleet(5, seed=4)
    strategy = GSGMPreset(clock=VirtualClock(seed=2, sigma=1.5), min_nodes=5, slack=slack,
                          schedule="buffer")  # fmt: skip
    result = _run(strategy, nodes)
    assert result.stopped_by == "budget" and result.num_updates == 20
    agg = strategy.aggregator
    assert agg.num_nodes == 5
    held = sum(agg.waiting.values())
    assert result.server_steps < result.num_updates  # some updates were averaged
    counts = agg.applied_counts
    assert max(counts.values()) - min(counts.values()) <= slack + 1
    # the fast nodes kept training: their finished tasks spread wider than the white list's
    tasks: dict[int, int] = {}
    for r in result.train_metrics_clientapp.values():
        tasks[r["stable-id"]] = tasks.get(r["stable-id"], 0) + 1
    assert max(tasks.values()) - min(tasks.values()) > slack + 1
    assert sum(tasks.values()) == result.num_updates >= result.server_steps + held
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())


@pytest.mark.parametrize(
    "kwargs",
    [{"server_optimizer": "sgd"}, {"server_optimizer": "adam"}, {"momentum_rule": "cycle"},
     {"momentum_rule": "implicit", "schedule": "buffer"}],
)  # fmt: skip
def test_variants_run_in_the_loop(kwargs):
    nodes = quadratic_fleet(4, seed=1)
    strategy = GSGMPreset(clock=VirtualClock(seed=1), min_nodes=4, **kwargs)
    result = _run(strategy, nodes, num_rounds=3)
    assert result.stopped_by == "budget" and result.num_updates == 12
    w = result.arrays.to_numpy_ndarrays()[0]
    target = np.mean([n.target for n in nodes.values()], axis=0)
    assert np.isfinite(w).all() and np.linalg.norm(w - target) < np.linalg.norm(target)
