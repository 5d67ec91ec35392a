"""The update guard (docs/algorithms.md, The update guard) and the robust buffer combination."""

import numpy as np
import pytest
from fakegrid import Crash, FakeGrid, crash_at, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord
from test_poisoned_node import ATTACKER, ATTACKS, PoisonedNode

from fl_async.aggregators import SSGD, ClientUpdate, FedBuff, UpdateGuard
from fl_async.aggregators.robust import combine_reference
from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, PRESETS
from fl_async.strategies.checkpoint import Checkpointer
from fl_async.validation import InvalidArgument

MODEL = [np.zeros(4, np.float32), np.array(0, np.int64)]


def update(scale, node=0):
    return ClientUpdate(node_id=node, delta=[np.full(4, scale, np.float32), np.array(1)])


def fed(guard, *scales, nodes=None):
    """``guard`` after accepting updates of these sizes, from nodes 0, 1, 2, ... (or ``nodes``)."""
    for s, node in zip(scales, nodes or range(len(scales)), strict=True):
        guard.accepted(guard.check(update(s, node), MODEL))
    return guard


def test_the_limit_is_factor_times_the_median_of_the_window():
    guard = fed(UpdateGuard(factor=10, window=3), 1.0, 5.0, 2.0, 3.0)  # window: 5, 2, 3
    assert guard.limit() == pytest.approx(10 * 3 * 2.0)  # a norm of 4 values of 3: 6
    assert guard.check(update(29.0), MODEL).scale == 1.0
    assert guard.check(update(31.0), MODEL).refused
    assert guard.state_dict() == {"norms": [[1, 10.0], [2, 4.0], [3, 6.0]]}


def test_each_node_has_one_vote_its_latest_norm():
    # A fast node sending most updates, all small, does not set the median alone.
    guard = fed(UpdateGuard(), *[1.0] * 20, 10.0, 10.0, nodes=[0] * 20 + [1, 2])
    assert guard.limit() == pytest.approx(10 * 20.0)  # median of 2, 20, 20
    assert not guard.check(update(60.0, node=3), MODEL).refused
    # A node's new accepted norm replaces its old one and makes it the most recent.
    guard = fed(UpdateGuard(window=2), 1.0, 2.0, 4.0, nodes=[0, 1, 0])
    assert guard.state_dict() == {"norms": [[1, 4.0], [0, 8.0]]}


def test_it_acts_after_warmup_nodes():
    guard = UpdateGuard(warmup=2)
    assert guard.limit() is None and not fed(guard, 1.0).check(update(1e6), MODEL).refused
    fed(guard, 1.0, nodes=[0])  # the same node again: still one node
    assert guard.limit() is None
    assert fed(guard, 1.0, nodes=[1]).check(update(1e6), MODEL).refused


def test_clip_mode_scales_to_the_limit_and_records_the_clipped_norm():
    guard = fed(UpdateGuard(mode="clip"), 1.0)
    verdict = guard.check(update(100.0), MODEL)
    assert verdict.norm == pytest.approx(20.0) and verdict.scale == pytest.approx(0.1)


def test_malformed_and_non_finite_updates_pass_to_the_rule():
    guard = fed(UpdateGuard(), 1.0)
    assert guard.check(update(np.nan), MODEL).norm is None
    wrong = ClientUpdate(node_id=0, delta=[np.ones(3, np.float32), np.array(1)])
    assert guard.check(wrong, MODEL).norm is None
    # Finite values whose float32 squares overflow are out of line, not non-finite.
    assert guard.check(update(1e30), MODEL).refused


@pytest.mark.parametrize("off", [None, 0, 0.0])
def test_none_or_zero_turns_it_off(off):
    guard = fed(UpdateGuard(factor=off), 1.0)
    assert not guard.active and guard.check(update(1e9), MODEL).norm is None
    assert UpdateGuard.of(off).factor is None and UpdateGuard.of(4).factor == 4.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factor": 0.5}, "factor must be 0 or None (off) or a number >= 1"),
        ({"factor": -1}, "factor must be a finite number >= 0"),
        ({"mode": "drop"}, "mode must be one of 'reject', 'clip', got 'drop'"),
        ({"window": 0}, "window must be an integer >= 1"),
        ({"window": 2, "warmup": 3}, "warmup must be at most window (2), got 3"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        UpdateGuard(**kwargs)


def test_state_round_trip_and_reset():
    guard = fed(UpdateGuard(window=3), 1.0, 2.0)
    other = UpdateGuard(window=3)
    other.load_state_dict(guard.state_dict())
    assert other.state_dict() == guard.state_dict() and other.limit() == guard.limit()
    other.reset()
    assert other.limit() is None


def test_a_window_saved_before_one_vote_per_node_loads_as_one_vote():
    guard = UpdateGuard(window=3)
    guard.load_state_dict({"norms": [8.0, 1.0, 2.0, 3.0]})  # one norm per update, no nodes
    assert guard.state_dict() == {"norms": [[-1, 2.5]]} and guard.limit() == pytest.approx(25.0)
    fed(guard, 100.0, 100.0, 100.0, nodes=[5, 6, 7])  # a vote like any: pushed out in its turn
    assert guard.limit() == pytest.approx(10 * 200.0)


def test_every_preset_takes_the_guard_and_is_guarded_by_default():
    for cls in PRESETS.values():
        assert cls().guard.factor == 10.0 and cls(guard=None).guard.factor is None


def _start(strategy, nodes, evaluate_fn=None):
    with task_identity():
        return strategy.start(
            FakeGrid(nodes, max_delay=0), initial_arrays(), num_rounds=6, timeout=5,
            train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}), evaluate_fn=evaluate_fn,
        )  # fmt: skip


def _poisoned_fleet():
    nodes = quadratic_fleet(5, seed=21)
    attacker = next(k for k, n in nodes.items() if n.partition_id == ATTACKER)
    return {**nodes, attacker: PoisonedNode(nodes[attacker], ATTACKS["scaled-x1000"])}


def test_a_resumed_run_keeps_the_guards_window_bit_for_bit(tmp_path):
    def make(directory=None):
        return ASGD(
            clock=VirtualClock(seed=4, sigma=0.3), min_nodes=5, seed=1, eval_every=1,
            checkpoint_dir=directory, checkpoint_every=4 if directory else None,
        )  # fmt: skip

    full = _start(make(), _poisoned_fleet())
    with pytest.raises(Crash):
        _start(make(tmp_path), _poisoned_fleet(), crash_at(11))
    saved = Checkpointer(tmp_path, None).load()
    # One vote for each honest node: the attacker's updates were all refused.
    assert saved.num_updates == 8 and sorted(n for n, _ in saved.guard["norms"]) == [0, 1, 2, 3]
    resumed = _start(make(tmp_path), _poisoned_fleet())
    assert resumed.rejected == full.rejected and full.rejected["too-large"] >= 2
    np.testing.assert_array_equal(resumed.arrays["w"].numpy(), full.arrays["w"].numpy())


def test_a_second_start_begins_with_an_empty_window():
    strategy = ASGD(clock=VirtualClock(seed=4, sigma=0.3), min_nodes=5, seed=1)
    _start(strategy, quadratic_fleet(5, seed=21))
    assert strategy.guard.limit() is not None
    strategy.guard.load_state_dict({"norms": [1e-9]})  # a window the next run must not inherit
    second = _start(strategy, quadratic_fleet(5, seed=21))
    assert second.rejected == {} and second.num_updates == 30


# ------------------------------------------------------------------ robust buffer combination
def _deltas(count, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
            for _ in range(count)]  # fmt: skip


@pytest.mark.parametrize(("combine", "trim"), [("median", 0.2), ("trimmed-mean", 0.2),
                                               ("trimmed-mean", 0.4)])  # fmt: skip
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_fedbuff_robust_steps_as_its_reference(combine, trim, momentum):
    agg = FedBuff(buffer_size=5, lr=0.5, server_momentum=momentum, staleness="constant",
                  combine=combine, trim=trim)  # fmt: skip
    agg.init([np.ones((3, 4), np.float32), np.zeros(5, np.float32)])
    w, m = [p.copy() for p in agg.params], [np.zeros_like(p) for p in agg.params]
    for step in range(2):
        deltas = _deltas(5, seed=step)
        for k, d in enumerate(deltas):
            assert agg.apply(ClientUpdate(node_id=k, delta=d)).stepped == (k == 4)
        combined = combine_reference(deltas, combine, trim)
        m = [np.float32(momentum) * mi + c for mi, c in zip(m, combined, strict=True)]
        w = [wi - np.float32(0.5) * mi for wi, mi in zip(w, m, strict=True)]
        for a, b in zip(agg.params, w, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("combine", ["median", "trimmed-mean"])
def test_ssgd_robust_steps_as_its_reference_and_ignores_a_huge_update(combine):
    agg = SSGD(lr=1.0, combine=combine)
    agg.init([np.zeros((3, 4), np.float32), np.zeros(5, np.float32)])
    deltas = _deltas(5)
    deltas[3] = [1e6 * d for d in deltas[3]]
    for k, d in enumerate(deltas):
        agg.apply(ClientUpdate(node_id=k, delta=d, num_examples=k + 1))
    assert agg.flush()
    expected = [-c for c in combine_reference(deltas, combine)]
    for a, b in zip(agg.params, expected, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.abs(a).max() < 10


def test_the_median_is_the_middle_value_and_the_trimmed_mean_cuts_each_end():
    values = [[np.array([v], np.float32)] for v in (1.0, 2.0, 3.0, 4.0, 100.0)]
    assert combine_reference(values, "median")[0][0] == 3.0
    assert combine_reference(values, "trimmed-mean", 0.2)[0][0] == 3.0  # mean of 2, 3, 4
    assert combine_reference(values, "trimmed-mean", 0.0)[0][0] == 22.0


def test_robust_buffer_settings_are_checked():
    with pytest.raises(InvalidArgument, match="combine must be one of 'mean', 'median'"):
        FedBuff(combine="mode")
    with pytest.raises(InvalidArgument, match=r"trim must be a finite number in \[0, 0.5\)"):
        SSGD(combine="trimmed-mean", trim=0.5)
    with pytest.raises(InvalidArgument, match="trim goes with combine='trimmed-mean' only"):
        SSGD(combine="median", trim=0.1)
