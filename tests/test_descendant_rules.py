"""MIFA, CA2FL and FADAS against their plain numpy references, bit for bit, on every kernel
branch; their relation to GSGM and FedBuff; ``forget``; the shared gradient cache."""

import numpy as np
import pytest
from exact import assert_same
from reference_calls import ca2fl_reference, fadas_reference, mifa_reference

from fl_async.aggregators import CA2FL, FADAS, GSGM, MIFA, ClientUpdate, FedBuff, kernels
from fl_async.aggregators.fadas import delay_adaptive_lr
from fl_async.validation import InvalidArgument

SHAPES = ((3, 4), (5,), ())


def _init(agg, seed=0):
    rng = np.random.default_rng(seed)
    agg.init([rng.normal(size=s).astype(np.float32) for s in SHAPES])
    return agg


def _zeros(agg):
    return [np.zeros_like(w) for w in agg.params]


def _updates(seed, count=15, num_nodes=4, scale=0.3):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        delta = [rng.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]
        yield int(rng.integers(num_nodes)), delta, int(rng.integers(0, 4))


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_array_equal(g, w)


def _same_cache(agg, G):
    cache = agg.state_dict()["state"]["cache"]
    assert sorted(cache) == sorted(G)
    for k in G:
        _same(cache[k], G[k])


# ------------------------------------------------------------------------------------ MIFA
MIFA_CASES = {
    "seen": {"lr": 0.7},
    "lr1-n6": {"lr": 1.0, "num_nodes": 6},
    "warmup": {"lr": 0.5, "num_nodes": 4, "warmup": True},
    "inverse": {"lr": 0.9, "num_nodes": 5, "lr_schedule": "inverse"},
}


@pytest.mark.parametrize("branch", ["in-place", "scratch"])
@pytest.mark.parametrize("case", sorted(MIFA_CASES))
def test_mifa_kernel_equals_reference_bit_for_bit(case, branch, monkeypatch, publishes):
    hyper = MIFA_CASES[case]
    if branch == "scratch":
        monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    agg = _init(MIFA(**hyper))
    state = {"w": [w.copy() for w in agg.params], "S": _zeros(agg), "G": {}, "t": 0}
    held = 0
    for node, delta, tau in _updates(seed=1):
        outcome = agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
        state = mifa_reference(state, node, delta, **hyper)
        assert outcome.stepped == state["stepped"]
        held += not outcome.stepped
        _same(agg.params, state["w"])
        _same(agg.state_dict()["state"]["sum"], state["S"])
        _same_cache(agg, state["G"])
        assert agg.steps == state["t"] == agg.version
    assert (held > 0) == bool(hyper.get("warmup"))  # warm-up holds until the 4 nodes reported
    assert len(publishes) == (15 if branch == "scratch" else 0)


def test_mifa_is_gsgm_without_partial_average_or_momentum():
    """GSGM with ``average_weight = 1``, ``momentum = 0`` and ``lr = eta`` steps with
    ``eta * S / n`` as MIFA does, ``n`` the nodes cached: bit for bit with ``eta = 1``, and to
    float32 rounding otherwise (GSGM scales ``S`` by ``1 / n`` and then by ``eta``, MIFA by
    ``eta / n`` at once). MIFA with ``num_nodes = N`` divides by N instead: it equals that GSGM
    from the moment every node has reported."""
    for lr, exact in ((1.0, True), (0.3, False)):
        mifa, gsgm = _init(MIFA(lr=lr)), _init(GSGM(lr=lr, momentum=0.0, average_weight=1.0))
        fixed = _init(MIFA(lr=lr, num_nodes=4))
        seen = set()
        for node, delta, tau in _updates(seed=4, count=20):
            seen.add(node)
            for agg in (mifa, gsgm, fixed):
                agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
            for a, b in zip(mifa.params, gsgm.params, strict=True):
                if exact:
                    np.testing.assert_array_equal(a, b)
                else:
                    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        assert seen == {0, 1, 2, 3}
    # before every node reported, num_nodes = N takes smaller steps than the nodes seen
    mifa, fixed = _init(MIFA(lr=1.0)), _init(MIFA(lr=1.0, num_nodes=4))
    delta = [np.ones(s, np.float32) for s in SHAPES]
    start = fixed.params[0].copy()
    for agg in (mifa, fixed):
        agg.apply(ClientUpdate(node_id=0, delta=delta, staleness=0))
    np.testing.assert_allclose(start - fixed.params[0], 0.25, rtol=1e-5)
    np.testing.assert_allclose(start - mifa.params[0], 1.0, rtol=1e-5)


def test_mifa_warmup_holds_until_every_node_reported_then_steps_every_update():
    agg = _init(MIFA(lr=1.0, num_nodes=3, warmup=True))
    w0 = [w.copy() for w in agg.params]
    delta = [np.full(s, 0.5, np.float32) for s in SHAPES]
    statuses = [
        agg.apply(ClientUpdate(node_id=k, delta=delta, staleness=0)).status for k in (0, 0, 1, 2, 1)
    ]
    assert statuses == ["held", "held", "held", "applied", "applied"]
    np.testing.assert_allclose(w0[0] - agg.params[0], 0.5 + 0.5, rtol=1e-5)  # S / 3 = 0.5, twice


def test_mifa_inverse_schedule_halves_the_second_step():
    agg = _init(MIFA(lr=1.0, num_nodes=1, lr_schedule="inverse"))
    delta = [np.ones(s, np.float32) for s in SHAPES]
    w0 = agg.params[1].copy()
    agg.apply(ClientUpdate(node_id=0, delta=delta, staleness=0))
    np.testing.assert_allclose(w0 - agg.params[1], 1.0, rtol=1e-5)
    agg.apply(ClientUpdate(node_id=0, delta=delta, staleness=0))
    np.testing.assert_allclose(w0 - agg.params[1], 1.5, rtol=1e-5)  # lr / 2 the second time


def test_mifa_forget_drops_the_node_from_the_sum_and_keeps_n():
    agg = _init(MIFA(lr=1.0, num_nodes=4))
    for k in range(3):
        delta = [np.full(s, k + 1.0, np.float32) for s in SHAPES]
        agg.apply(ClientUpdate(node_id=k, delta=delta, staleness=0))
    agg.forget(1)
    agg.forget(7)  # never seen: nothing to drop
    state = agg.state_dict()["state"]
    assert sorted(state["cache"]) == [0, 2] and agg.num_cached == 2
    np.testing.assert_array_equal(state["sum"][0], np.full((3, 4), 4.0, np.float32))
    before = agg.params[0].copy()
    agg.apply(ClientUpdate(node_id=0, delta=[np.zeros(s, np.float32) for s in SHAPES], staleness=0))
    np.testing.assert_allclose(
        before - agg.params[0], 3.0 / 4, rtol=1e-5
    )  # S = 0 + 3, still over N = 4


@pytest.mark.parametrize("rule", [MIFA, CA2FL])
def test_cache_spilled_to_disk_gives_the_same_bits(rule, tmp_path):
    def run(**cache):
        agg = _init(rule(**cache))
        for node, delta, tau in _updates(seed=2, count=12, num_nodes=5):
            agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
            if node == 4:
                agg.forget(1)
        return agg

    memory, disk = run(), run(cache_memory=0, cache_dir=tmp_path)
    assert disk.cache_usage.nodes_on_disk == disk.num_cached > 0
    assert memory.cache_usage.nodes_on_disk == 0
    assert_same(memory.state_dict()["state"], disk.state_dict()["state"])
    _same(memory.params, disk.params)
    disk.close()


def test_bad_keywords_name_the_value_and_what_is_allowed():
    with pytest.raises(InvalidArgument, match="lr_schedule.*'cosine'"):
        MIFA(lr_schedule="cosine")
    with pytest.raises(InvalidArgument, match="warmup must be True or False, got 'yes'"):
        MIFA(warmup="yes")
    with pytest.raises(InvalidArgument, match="delay_rule.*'min'"):
        FADAS(delay_rule="min")
    with pytest.raises(InvalidArgument, match="buffer_size"):
        CA2FL(buffer_size=0)
    with pytest.raises(TypeError):
        MIFA(staleness="polynomial")  # no staleness weight


# ----------------------------------------------------------------------------------- CA2FL
@pytest.mark.parametrize(
    "hyper", [{"lr": 1.0, "buffer_size": 3}, {"lr": 0.6, "buffer_size": 4, "num_nodes": 6}]
)
def test_ca2fl_kernel_equals_reference_bit_for_bit(hyper, publishes):
    """Every update is one kernel into scratch; the buffers see first arrivals with and without
    a cached update, and repeated arrivals within one buffer."""
    agg = _init(CA2FL(**hyper))
    z = _zeros(agg)
    state = {"w": [w.copy() for w in agg.params], "S": z, "h": z, "B": z, "G": {}, "G0": {}, "m": 0}
    steps = repeats = 0
    for node, delta, tau in _updates(seed=3, count=20):
        repeats += node in state["G0"]
        outcome = agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
        state = ca2fl_reference(state, node, delta, **hyper)
        steps += outcome.stepped
        assert outcome.stepped == (state["m"] == 0) and agg.count == state["m"]
        rule = agg.state_dict()["state"]
        _same(agg.params, state["w"])
        for key, name in (("sum", "S"), ("calibration", "h"), ("buffer", "B")):
            _same(rule[key], state[name])
        _same_cache(agg, state["G"])
    assert steps == agg.version == 20 // hyper["buffer_size"] and repeats > 0
    assert len(publishes) == 20


def test_ca2fl_with_empty_caches_is_fedbuff():
    """The first buffer sees no cached update: its step is FedBuff's (``s = constant``,
    no momentum)."""
    ca2fl, fedbuff = (
        _init(CA2FL(buffer_size=3)),
        _init(FedBuff(buffer_size=3, staleness="constant")),
    )
    for k, (_, delta, tau) in enumerate(_updates(seed=5, count=3)):
        for agg in (ca2fl, fedbuff):
            agg.apply(ClientUpdate(node_id=k, delta=delta, staleness=tau))
    assert ca2fl.version == fedbuff.version == 1
    _same(ca2fl.params, fedbuff.params)


def test_ca2fl_forget_keeps_the_buffer_and_drops_g0():
    agg = _init(CA2FL(buffer_size=4, num_nodes=2))
    one = [np.ones(s, np.float32) for s in SHAPES]
    for k in (0, 1, 0):
        agg.apply(ClientUpdate(node_id=k, delta=one, staleness=0))
    assert agg.version == 0 and agg.count == 3
    buffer = [b.copy() for b in agg.state_dict()["state"]["buffer"]]
    agg.forget(0)
    state = agg.state_dict()["state"]
    assert sorted(state["cache"]) == [1] and state["starts"] == {} and state["fresh"] == [1]
    _same(state["buffer"], buffer)
    np.testing.assert_array_equal(state["sum"][1], np.ones(5, np.float32))


# ----------------------------------------------------------------------------------- FADAS
FADAS_CASES = {
    "code": {},
    "capped": {"delay_rule": "capped", "lr": 0.8},
    "none-biased": {"delay_rule": "none", "bias_correction": True},
    "corrected": {"bias_correction": True, "tau_c": 2, "buffer_size": 2},
}


@pytest.mark.parametrize("case", sorted(FADAS_CASES))
def test_fadas_kernel_equals_reference_bit_for_bit(case, publishes):
    agg = _init(FADAS(**{"buffer_size": 3, "lr": 0.05, **FADAS_CASES[case]}))
    hyper = {
        k: getattr(agg, k)
        for k in (
            "lr",
            "buffer_size",
            "beta1",
            "beta2",
            "eps",
            "tau_c",
            "delay_rule",
            "bias_correction",
        )
    }
    z = _zeros(agg)
    state = {
        "w": [w.copy() for w in agg.params],
        "B": z,
        "m": z,
        "q": z,
        "q_max": z,
        "c": 0,
        "tau_max": 0,
        "t": 0,
    }
    for node, delta, tau in _updates(seed=6, count=18):
        outcome = agg.apply(ClientUpdate(node_id=node, delta=delta, staleness=tau))
        state = fadas_reference(state, delta, tau, **hyper)
        assert outcome.stepped == (state["c"] == 0)
        rule = agg.state_dict()["state"]
        _same(agg.params, state["w"])
        for key in ("m", "q", "q_max"):
            _same(rule[key], state[key])
        _same(rule["buffer"], state["B"])
        assert (rule["count"], rule["tau_max"], rule["t"]) == (
            state["c"],
            state["tau_max"],
            state["t"],
        )
    assert agg.version == 18 // hyper["buffer_size"]
    assert len(publishes) == 18


def test_fadas_delay_adaptive_rate():
    assert delay_adaptive_lr(0.1, 1, tau_c=1, delay_rule="inverse") == 0.1
    assert delay_adaptive_lr(0.1, 4, tau_c=1, delay_rule="inverse") == 0.1 / 4
    assert delay_adaptive_lr(0.1, 4, tau_c=1, delay_rule="capped") == 0.1  # min(0.1, 1/4)
    assert delay_adaptive_lr(1.0, 4, tau_c=1, delay_rule="capped") == 0.25
    assert delay_adaptive_lr(0.1, 9, tau_c=1, delay_rule="none") == 0.1


def test_fadas_first_step_without_bias_correction_moves_lr_over_one_minus_beta1_ratio():
    """With ``q_max = (1 - beta2) g^2`` and ``m = (1 - beta1) g`` after one step, each
    coordinate moves ``lr (1 - beta1) / sqrt(1 - beta2)`` against the sign of ``g``."""
    agg = _init(FADAS(buffer_size=1, lr=0.01))
    w0 = agg.params[1].copy()
    delta = [np.full(s, 2.0, np.float32) for s in SHAPES]
    agg.apply(ClientUpdate(node_id=0, delta=delta, staleness=0))
    np.testing.assert_allclose(w0 - agg.params[1], 0.01 * 0.1 / np.sqrt(0.01), rtol=1e-5)


def test_mifa_update_whose_norm_overflows_runs_into_scratch_and_is_checked(publishes):
    """A finite delta whose squared norm overflows float32 gives no bound: the step runs into
    scratch, and a result that overflows is rejected with the model untouched."""
    agg = _init(MIFA(lr=1.0))
    big = [np.full(s, 3e38, np.float32) for s in SHAPES]
    assert agg.apply(ClientUpdate(node_id=0, delta=big, staleness=0)).stepped
    assert len(publishes) == 1
    before = [w.copy() for w in agg.params]
    outcome = agg.apply(ClientUpdate(node_id=1, delta=big, staleness=0))  # S = 6e38: overflow
    assert outcome.reason == "overflow" and agg.num_rejected == {"overflow": 1}
    _same(agg.params, before)
    assert agg.num_cached == 1
