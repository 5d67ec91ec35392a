"""Equivalences between rules: FedBuff with K nodes is SSGD, ASGD fed by one node is sequential
SGD, GSGM and DC-ASGD reduce to ASGD, Trend-Smooth unshrunk is SGD or torch's momentum and Adam."""

import numpy as np
import pytest
import torch

from fl_async.aggregators import (
    ASGD,
    DCASGD,
    GSGM,
    SSGD,
    ClientUpdate,
    FedBuff,
    Polynomial,
    TrendSmooth,
)


# ------------------------------------------------------------------------------ equivalences
def _random_trace(seed, num_nodes=4, steps=12, shapes=((3, 4), (5,))):
    rng = np.random.default_rng(seed)
    return [
        (
            int(rng.integers(num_nodes)),
            [rng.normal(size=s).astype(np.float32) for s in shapes],
            int(rng.integers(0, 4)),
        )
        for _ in range(steps)
    ]


def _run_random(agg, trace, shapes=((3, 4), (5,))):
    agg.init([np.ones(s, np.float32) for s in shapes])
    for node, delta, tau in trace:
        base = [p.copy() for p in agg.params]
        agg.apply(ClientUpdate(node_id=node, delta=delta, base=base, staleness=tau, num_examples=8))
    return agg.params


def test_fedbuff_with_k_nodes_equals_ssgd():
    rng = np.random.default_rng(1)
    fedbuff = FedBuff(buffer_size=4, lr=0.7, staleness="constant")
    ssgd = SSGD(lr=0.7)
    for agg in (fedbuff, ssgd):
        agg.init([np.ones((6,), np.float32)])
    for _ in range(3):
        deltas = [[rng.normal(size=6).astype(np.float32)] for _ in range(4)]
        for agg in (fedbuff, ssgd):
            base = [p.copy() for p in agg.params]
            for k, d in enumerate(deltas):
                agg.apply(ClientUpdate(node_id=k, delta=d, base=base, num_examples=5))
        assert ssgd.flush()
    assert fedbuff.version == ssgd.version == 3
    np.testing.assert_allclose(fedbuff.params[0], ssgd.params[0], rtol=1e-6)


def test_asgd_fed_by_one_node_is_sequential_sgd():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    local_lr = 0.05
    w_seq = np.zeros(3, np.float32)
    agg = ASGD(lr=1.0)
    agg.init([np.zeros(3, np.float32)])
    for i in range(20):
        grad = ((x[i] @ w_seq - y[i]) * x[i]).astype(np.float32)
        w_seq = w_seq - np.float32(local_lr) * grad
        base = agg.params[0].copy()
        g_node = ((x[i] @ base - y[i]) * x[i]).astype(np.float32)
        trained = base - np.float32(local_lr) * g_node
        agg.apply(ClientUpdate(node_id=0, delta=[base - trained], base=[base]))
    np.testing.assert_allclose(agg.params[0], w_seq, rtol=1e-5, atol=1e-6)


def test_gsgm_without_average_and_momentum_is_asgd():
    trace = _random_trace(3)
    weight = Polynomial(a=0.5)
    gsgm = _run_random(GSGM(lr=0.3, momentum=0.0, average_weight=0.0, staleness=weight), trace)
    asgd = _run_random(ASGD(lr=0.3, staleness=weight), trace)
    for a, b in zip(gsgm, asgd, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_dcasgd_with_zero_lambda_is_asgd():
    trace = _random_trace(4)
    dc = _run_random(DCASGD(lr=0.4, lam=0.0, staleness="hinge"), trace)
    asgd = _run_random(ASGD(lr=0.4, staleness="hinge"), trace)
    for a, b in zip(dc, asgd, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_trend_smooth_without_shrink_is_sgd():
    trace = _random_trace(5)
    ts = _run_random(TrendSmooth(lr=0.2, base="sgd", shrink=1.0), trace)
    asgd = _run_random(ASGD(lr=0.2), trace)
    for a, b in zip(ts, asgd, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("base", ["momentum", "adam"])
def test_trend_smooth_without_shrink_is_torch_optimizer(base):
    trace = _random_trace(6, shapes=((7,),))
    if base == "momentum":
        ours = TrendSmooth(lr=0.1, base="momentum", beta=0.8, shrink=1.0)
    else:
        ours = TrendSmooth(lr=0.01, base="adam", beta1=0.9, beta2=0.99, shrink=1.0)
    got = _run_random(ours, trace, shapes=((7,),))
    p = torch.nn.Parameter(torch.ones(7))
    if base == "momentum":
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.8)
    else:
        opt = torch.optim.Adam([p], lr=0.01, betas=(0.9, 0.99), eps=1e-8)
    for _, delta, _ in trace:
        p.grad = torch.from_numpy(delta[0].copy())
        opt.step()
    np.testing.assert_allclose(got[0], p.detach().numpy(), rtol=1e-5, atol=1e-6)
