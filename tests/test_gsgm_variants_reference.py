"""GSGM's variants (docs/algorithms.md, GSGM) against their readable reference, bit for bit, on
both branches (in place and through scratch), and through ``state_dict()``/``load_state_dict()``."""

import pickle

import numpy as np
import pytest
from exact import assert_same
from gsgm_variants import COMMON, SHAPES, _params, feed, stream
from reference_calls import gsgm_reference, gsgm_variant_reference

from fl_async.aggregators import APPLIED, GSGM, HELD, STEPPED, kernels

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


def start_state(agg):
    """The reference state matching a freshly initialised aggregator."""
    return {
        "w": [p.copy() for p in agg.params],
        "S": _zeros(),
        "G": {},
        "u": _zeros(),
        "c": _zeros(),
        "j": 0,
        "tau_sum": 0.0,
        "tau_count": 0,
        "m": _zeros(),
        "q": _zeros(),
        "t": 0,
    }


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


@pytest.fixture(params=["in-place", "scratch"])
def branch(request, monkeypatch, publishes):
    """Count the scratch branch's publications; on "scratch" every step goes through it."""
    calls = publishes
    if request.param == "scratch":  # no bound is below 0
        monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    return request.param, calls


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
    [
        ("update", 0, 4),
        ("update", 1, 4),
        ("update", 0, None),
        ("cycle", 0, 4),
        ("implicit", 1, 4),
        ("adam", 0, 4),
        ("sgd", 2, 4),
    ],
)
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
    for other in (
        GSGM(),
        GSGM(server_optimizer="adam"),
        GSGM(momentum_rule="cycle"),
        GSGM(momentum_rule="implicit"),
        GSGM(schedule="buffer"),
    ):
        with pytest.raises(ValueError, match="does not match server_optimizer"):
            other.load_state_dict(agg.state_dict())
