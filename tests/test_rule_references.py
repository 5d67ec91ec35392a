"""Every rule's fast kernel against its plain reference (``fl_async.aggregators.reference``), on
random hyperparameters and random update streams (hypothesis).

Each example draws a rule's hyperparameters (every option that changes the arithmetic, ``lr``
exactly 1 or not, a staleness weight), a stream of updates from a few nodes with stale bases
and ``forget`` calls, and the kernel's branch (in place when running bounds prove a step
finite, or through scratch for every step). The aggregator and the reference then see the same
updates: fed float32 arrays the reference does the kernel's float operations in the same order,
so every array and counter must be equal to the bit (Trend-Smooth, whose reference follows the
equations' order instead, to float32 rounding); fed the same inputs in float64, the reference
gives the rule in exact arithmetic, which the float32 kernel must match to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fl_async.aggregators import AGGREGATORS, ClientUpdate, kernels
from fl_async.aggregators.reference import (
    asgd,
    ca2fl,
    dcasgd,
    fadas,
    fedasync,
    fedbuff,
    fedcompass,
    gsgm,
    mifa,
    odsgd,
    ssgd,
    trend_smooth,
)
from fl_async.aggregators.updates import Rejected

SHAPES = ((3, 4), (5,), ())
NODES = 4
EXAMPLES = 25
"""Examples per rule: each runs a stream of up to 24 updates through both branches' choice."""

LR = st.one_of(st.just(1.0), st.floats(0.01, 0.9))
STALENESS = st.sampled_from(["constant", "polynomial", "hinge"])
UNIT = st.one_of(st.just(0.0), st.floats(0.01, 0.95))
"""A decay or weight in [0, 1): 0 exactly, or not so small that float32 and float64 part ways
(a factor of 1e-172 is 0 in float32, not in float64, and a trend's sign then differs)."""


@dataclass
class Rule:
    module: Any
    hyper: st.SearchStrategy[dict[str, Any]]
    keys: dict[str, str] = field(default_factory=dict)
    """The aggregator's ``state_dict()["state"]`` key -> the reference's state key."""
    init_keys: tuple[str, ...] = ()
    """Hyperparameters the reference's ``init`` takes too."""
    exact: bool = True
    barrier: bool = False
    forgets: bool = False


RULES: dict[str, Rule] = {
    "asgd": Rule(asgd, st.fixed_dictionaries({"lr": LR, "staleness": STALENESS})),
    "fedasync": Rule(
        fedasync,
        st.fixed_dictionaries({"alpha": st.floats(0.05, 1.0), "staleness": STALENESS}),
    ),
    "fedbuff": Rule(
        fedbuff,
        st.fixed_dictionaries(
            {
                "buffer_size": st.integers(1, 4),
                "lr": LR,
                "server_momentum": st.one_of(st.just(0.0), UNIT),
                "staleness": STALENESS,
                "combine": st.sampled_from(["mean", "median", "trimmed-mean"]),
            }
        ),
        keys={"buffer": "B", "momentum": "m", "count": "c"},
        init_keys=("server_momentum",),
    ),
    "dcasgd": Rule(
        dcasgd,
        st.fixed_dictionaries(
            {
                "lr": LR,
                "lam": st.one_of(UNIT, st.just(1.0)),
                "adaptive": st.booleans(),
                "lam0": UNIT,
                "ms_decay": UNIT,
                "staleness": STALENESS,
            }
        ),
        keys={"mean_square": "M"},
        init_keys=("adaptive",),
    ),
    "gsgm": Rule(
        gsgm,
        st.one_of(
            st.fixed_dictionaries(
                {
                    "server_optimizer": st.just("momentum"),
                    "momentum_rule": st.sampled_from(["update", "cycle", "implicit"]),
                }
            ),
            st.fixed_dictionaries({"server_optimizer": st.sampled_from(["sgd", "adam"])}),
        ).flatmap(
            lambda rules: st.fixed_dictionaries(
                {
                    **{k: st.just(v) for k, v in rules.items()},
                    "lr": LR,
                    "momentum": UNIT,
                    "average_weight": st.one_of(UNIT, st.just(1.0)),
                    "beta1": UNIT,
                    "beta2": UNIT,
                    "staleness": STALENESS,
                }
            )
        ),
        keys={"sum": "S", "velocity": "u", "m": "m", "q": "q", "cycle_sum": "c", "t": "t"},
        forgets=True,
    ),
    "trendsmooth": Rule(
        trend_smooth,
        st.fixed_dictionaries(
            {
                "lr": st.floats(0.01, 1.0),
                "base": st.sampled_from(["sgd", "momentum", "adam"]),
                "beta": UNIT,
                # Not 0: Adam without a first moment steps by about lr * sign(g), and where the
                # equations' order gives g = 0 exactly and the kernel's a rounding error (trend
                # and shrink at 0), the two differ by lr (found by hypothesis: lr 0.875, 9 updates)
                "beta1": st.floats(0.01, 0.95),
                "beta2": UNIT,
                "trend_decay": st.one_of(UNIT, st.just(1.0)),
                "shrink": st.one_of(UNIT, st.just(1.0)),
                "staleness": STALENESS,
            }
        ),
        keys={"trend": "T", "m": "m", "q": "q", "t": "t"},
        exact=False,
    ),
    "mifa": Rule(
        mifa,
        st.fixed_dictionaries(
            {
                "lr": LR,
                "num_nodes": st.sampled_from([None, NODES, NODES + 2]),
                "warmup": st.booleans(),
                "lr_schedule": st.sampled_from(["constant", "inverse"]),
            }
        ),
        keys={"sum": "S", "steps": "t"},
        forgets=True,
    ),
    "ca2fl": Rule(
        ca2fl,
        st.fixed_dictionaries(
            {
                "buffer_size": st.integers(1, 4),
                "lr": LR,
                "num_nodes": st.sampled_from([None, NODES, NODES + 2]),
            }
        ),
        keys={"sum": "S", "calibration": "h", "buffer": "B", "count": "m"},
        forgets=True,
    ),
    "fadas": Rule(
        fadas,
        st.fixed_dictionaries(
            {
                "buffer_size": st.integers(1, 4),
                "lr": st.floats(0.001, 0.5),
                "beta1": UNIT,
                "beta2": UNIT,
                "tau_c": st.integers(0, 2),
                "delay_rule": st.sampled_from(["inverse", "capped", "none"]),
                "bias_correction": st.booleans(),
            }
        ),
        keys={"buffer": "B", "m": "m", "q": "q", "q_max": "q_max", "count": "c", "t": "t"},
    ),
    "ssgd": Rule(
        ssgd,
        st.fixed_dictionaries(
            {"lr": LR, "combine": st.sampled_from(["mean", "median", "trimmed-mean"])}
        ),
        barrier=True,
    ),
    "odsgd": Rule(odsgd, st.fixed_dictionaries({"lr": LR}), barrier=True),
    "fedcompass": Rule(
        fedcompass,
        st.fixed_dictionaries(
            {"alpha": st.floats(0.05, 1.0), "num_nodes": st.integers(1, 6), "staleness": STALENESS}
        ),
        barrier=True,
    ),
}


FLUSH_KEYS = ("lr", "combine", "alpha", "num_nodes", "staleness")
"""The hyperparameters a barrier rule's reference takes at ``flush``."""


@dataclass
class Run:
    """The aggregator and the reference, fed one stream."""

    name: str
    hyper: dict[str, Any]
    dtype: type
    agg: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    history: list[list[np.ndarray]] = field(default_factory=list)
    statuses: set[str] = field(default_factory=set)

    def start(self, params: list[np.ndarray]) -> None:
        rule = RULES[self.name]
        self.agg = AGGREGATORS[self.name](**self.hyper)
        self.agg.init(params)
        init = {k: self.hyper[k] for k in rule.init_keys}
        self.state = rule.module.init([p.astype(self.dtype) for p in params], **init)
        self.history = [[p.copy() for p in self.agg.params]]

    def reference_hyper(self) -> dict[str, Any]:
        hyper = dict(self.hyper)
        if "staleness" in hyper:
            hyper["staleness"] = self.agg.staleness  # the resolved callable
        return hyper


def _stream(seed: int, count: int) -> list[tuple[int, list[np.ndarray], int, str]]:
    """``(node, delta, tau, event)``: ``event`` is ``"forget"``, ``"flush"`` or ``""``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        node = int(rng.integers(NODES))
        delta = [rng.normal(scale=0.3, size=s).astype(np.float32) for s in SHAPES]
        event = str(rng.choice(["", "", "forget", "flush"]))
        out.append((node, delta, int(rng.integers(0, 4)), event))
    return out


def _feed(run: Run, stream, on_update: Callable[[Run], None]) -> None:
    rule = RULES[run.name]
    module, hyper = rule.module, run.reference_hyper()
    flush_keys = {k: v for k, v in hyper.items() if k in FLUSH_KEYS}
    update_keys = {} if rule.barrier else hyper
    iterations: dict[int, int] = {}
    for node, delta, tau, event in stream:
        b = max(len(run.history) - 1 - tau, 0)
        base = run.history[b]
        iteration = iterations.get(node, run.agg.version) if run.name == "odsgd" else None
        tau = len(run.history) - 1 - b
        u = ClientUpdate(
            node_id=node,
            delta=delta,
            base=base,
            staleness=tau,
            iteration=iteration,
            num_examples=node + 1,
        )
        outcome = run.agg.apply(u)
        wide = ClientUpdate(
            node_id=node,
            delta=[d.astype(run.dtype) for d in delta],
            base=[x.astype(run.dtype) for x in base],
            staleness=u.staleness,
            iteration=iteration,
            num_examples=node + 1,
        )
        try:
            run.state, status = module.update(run.state, wide, **update_keys)
        except Rejected as rejection:
            status = f"rejected:{rejection.reason}"
        got = outcome.status if outcome.accepted else f"rejected:{outcome.reason}"
        assert got == status
        run.statuses.add(status)
        if iteration is not None:  # a node too stale catches up with the version
            iterations[node] = iteration + 1 if outcome.accepted else run.agg.version
        if event == "flush" and rule.barrier:
            assert run.agg.flush() == bool(run.state["held"])
            run.state = module.flush(run.state, **flush_keys)
        if event == "forget" and rule.forgets:
            run.agg.forget(node)
            run.state = module.forget(run.state, node)
        if run.agg.version >= len(run.history):
            run.history.append([p.copy() for p in run.agg.params])
        on_update(run)


def _pairs(run: Run) -> list[tuple[Any, Any, str]]:
    """(the aggregator's value, the reference's, what it is) for the model and each key."""
    rule = RULES[run.name]
    saved = run.agg.state_dict()["state"]
    pairs = [(run.agg.params, run.state["w"], "w")]
    for key, name in rule.keys.items():
        if saved.get(key) is not None:
            pairs.append((saved[key], run.state[name], key))
    if "cache" in saved:
        assert sorted(saved["cache"]) == sorted(run.state["G"])
        pairs += [(saved["cache"][k], run.state["G"][k], f"G[{k}]") for k in run.state["G"]]
    return pairs


def _assert_equal(run: Run, *, exact: bool, rtol: float, atol: float) -> None:
    for got, want, what in _pairs(run):
        if not isinstance(got, list):
            assert got == want, what
            continue
        for g, w in zip(got, want, strict=True):
            if exact:
                assert g.dtype == w.dtype == np.float32, what
                np.testing.assert_array_equal(g, w, err_msg=what)
            else:
                want = w.astype(np.float64)
                np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, err_msg=what)


def _check(name: str, hyper: dict[str, Any], seed: int, count: int, in_place: bool) -> None:
    rule = RULES[name]
    rng = np.random.default_rng(seed + 1)
    params = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    stream = _stream(seed, count)
    with pytest.MonkeyPatch.context() as patch:
        if not in_place:
            patch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)  # every step through scratch
        narrow = Run(name, hyper, np.float32)
        narrow.start(params)
        exact = rule.exact
        _feed(narrow, stream, lambda r: _assert_equal(r, exact=exact, rtol=1e-6, atol=2.5e-7))
        wide = Run(name, hyper, np.float64)
        wide.start(params)
        _feed(wide, stream, lambda r: _assert_equal(r, exact=False, rtol=2e-5, atol=2e-5))


def test_every_rule_has_a_reference():
    assert set(RULES) == set(AGGREGATORS)
    for rule in RULES.values():
        assert callable(rule.module.init) and callable(rule.module.update)


@pytest.mark.parametrize("name", sorted(RULES))
def test_kernel_equals_reference(name):
    """Held to the bit on float32 (Trend-Smooth: to rounding), to rounding of float64."""

    # derandomize: the same examples in every run (CI included), drawn from a fixed seed
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        hyper=RULES[name].hyper,
        seed=st.integers(0, 2**32 - 1),
        count=st.integers(1, 24),
        in_place=st.booleans(),
    )
    def check(hyper, seed, count, in_place):
        _check(name, hyper, seed, count, in_place)

    check()
