"""The update guard (docs/algorithms.md, The update guard) and the robust buffer combination."""

import numpy as np
import pytest
from fakegrid import Crash, crash_at, quadratic_fleet, task_identity
from strategy_loop import run
from test_poisoned_node import ATTACKER, ATTACKS, PoisonedNode

from fl_async.aggregators import SSGD, ClientUpdate, FedBuff, UpdateGuard
from fl_async.aggregators.guard_reference import clip
from fl_async.aggregators.robust import combine_reference
from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, PRESETS
from fl_async.strategies.checkpoint import Checkpointer
from fl_async.validation import InvalidArgument

MODEL = [np.zeros(4, np.float32), np.array(0, np.int64)]


def update(scale, node=0, direction=(1.0, 1.0, 1.0, 1.0)):
    delta = np.float32(scale) * np.array(direction, np.float32)
    return ClientUpdate(node_id=node, delta=[delta, np.array(1)])


def opened(guard, *scales, nodes=None):
    """``guard`` opened with held updates of these sizes from nodes 0, 1, 2, ... (or ``nodes``)."""
    held = [update(s, n) for s, n in zip(scales, nodes or range(len(scales)), strict=True)]
    verdicts = guard.open([(u, guard.measure(u, MODEL)) for u in held])
    for u, verdict in zip(held, verdicts, strict=True):
        if not verdict.refused:
            guard.accepted(verdict, clip(u.delta, verdict.scale))
    return verdicts


def test_updates_are_held_until_the_quorum_then_judged_against_its_median():
    guard = UpdateGuard()
    guard.begin(5)
    assert guard.holding and guard.check(update(1.0), MODEL).hold
    assert not guard.ready([0, 1], may_vote=[2, 3]) and guard.ready([0, 1, 2], may_vote=[3])
    # A huge first update is refused and a tiny one too (a zero one is never held): none of
    # them sets the limit, factor x the median of the votes; one 5 x the median is clipped.
    assert guard.check(update(0.0, 3), MODEL).reason == "no-update"  # never held, never votes
    huge, honest, _, tiny, _ = opened(guard, 1000.0, 1.0, 2.0, 1e-6, 1.5)
    assert guard.limit() == pytest.approx(3 * 3.5) and not guard.holding  # votes 2000, 2, 4, 3
    assert huge.reason == "too-large" and honest.scale == 1.0
    large = guard.check(update(10.0, 6), MODEL)  # votes 2000, 2, 4, 3, 20: limit 3 x 4
    assert large.scale == pytest.approx(12.0 / 20.0) and not large.refused
    assert tiny.reason == "no-update" and len(guard.state_dict()["votes"]) == 5
    assert guard.check(update(0.0, 5), MODEL).reason == "no-update"
    assert guard.check(update(1e-4, 5), MODEL).reason == "no-update"  # 2e-4 <= 1e-3 x 4


def test_it_opens_early_when_no_other_vote_can_come():
    guard = UpdateGuard()
    guard.begin(2)  # the quorum is at most the number of nodes
    assert guard.ready([0, 1], may_vote=[])
    guard.begin(5)
    for node in (0, 3):  # node 0's update is held, node 3's refused (or its task failed)
        guard.heard(node)
    assert guard.ready([0], may_vote=[0, 3]) and not guard.ready([0], may_vote=[0, 3, 4])


def test_each_node_has_one_vote_its_latest_arriving_norm():
    guard = UpdateGuard(window=3)
    opened(guard, 1.0, 5.0, 2.0)
    for scale, node in [(3.0, 3), (100.0, 1), (4.0, 1)]:  # refused or not, each arrival votes
        guard.check(update(scale, node), MODEL)
    assert guard.state_dict()["votes"] == [[2, 4.0], [3, 6.0], [1, 8.0]]
    assert guard.limit() == pytest.approx(3 * 6.0)


def test_reject_mode_refuses_what_clip_mode_scales_down():
    guard = UpdateGuard(mode="reject")
    opened(guard, 1.0, 1.0, 1.0)
    assert guard.check(update(100.0, 4), MODEL).reason == "too-large"
    assert UpdateGuard().check(update(1.0), MODEL).hold


def test_an_update_against_a_coherent_aggregate_is_refused():
    guard = UpdateGuard()
    opened(guard, 1.0, 1.1, 0.9, 1.0, 1.2)  # five nodes pushing the same way
    for k in range(20):
        verdict = guard.check(update(1.0, k % 5), MODEL)
        guard.accepted(verdict, update(1.0).delta)
    flipped = guard.check(update(-5.0, 5), MODEL)  # sign-flipped, clipped or not
    assert flipped.reason == "wrong-direction"
    assert guard.check(update(-1.5, 6), MODEL).reason == "wrong-direction"
    assert not guard.check(update(-0.5, 7), MODEL).refused  # at most one median's length
    assert not guard.check(update(1.0, 8, (1, -1, 1, -1)), MODEL).refused  # orthogonal


def test_no_direction_is_judged_while_the_updates_point_every_which_way():
    guard = UpdateGuard()
    axes = [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1)]
    for k in range(40):
        verdict = guard.check(update(1.0, k % 4, axes[k % 4]), MODEL)
        if verdict.hold:
            continue
        guard.accepted(verdict, update(1.0, 0, axes[k % 4]).delta)
    if guard.holding:
        opened(guard)
    assert not guard.check(update(-2.0, 9, (1, 1, 1, 1)), MODEL).refused


def test_malformed_and_non_finite_updates_pass_to_the_rule():
    guard = UpdateGuard()
    opened(guard, 1.0, 1.0, 1.0)
    assert guard.check(update(np.nan), MODEL).norm is None
    wrong = ClientUpdate(node_id=0, delta=[np.ones(3, np.float32), np.array(1)])
    assert guard.check(wrong, MODEL).norm is None
    # Finite values whose float32 squares overflow are out of line, not non-finite.
    assert guard.check(update(1e30), MODEL).scale < 1e-20


@pytest.mark.parametrize("off", [None, 0, 0.0])
def test_none_or_zero_turns_it_off(off):
    guard = UpdateGuard(factor=off)
    assert not guard.active and not guard.holding and guard.check(update(1e9), MODEL).norm is None
    assert UpdateGuard.of(off).factor is None and UpdateGuard.of(4).factor == 4.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factor": 0.5}, "factor must be 0 or None (off) or a number >= 1"),
        ({"factor": -1}, "factor must be a finite number >= 0"),
        ({"mode": "drop"}, "mode must be one of 'clip', 'reject', got 'drop'"),
        ({"window": 0}, "window must be an integer >= 1"),
        ({"window": 2, "quorum": 3}, "quorum must be at most window (2), got 3"),
        ({"direction": -0.5}, "direction must be a finite number >= 0"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        UpdateGuard(**kwargs)


def test_state_round_trip_and_reset():
    guard = UpdateGuard(window=3)
    opened(guard, 1.0, 2.0, 3.0)
    guard.accepted(guard.check(update(2.0, 1), MODEL), update(2.0).delta)
    other = UpdateGuard(window=3)
    other.load_state_dict(guard.state_dict())
    assert _same(other.state_dict(), guard.state_dict()) and other.limit() == guard.limit()
    other.reset()
    assert other.limit() is None and other.holding


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def test_a_window_saved_by_the_previous_guard_loads_as_the_votes_of_an_open_guard():
    guard = UpdateGuard(window=3)
    guard.load_state_dict({"norms": [[4, 8.0], [5, 1.0], [6, 2.0]]})  # node, accepted norm
    assert not guard.holding and guard.limit() == pytest.approx(3 * 2.0)
    guard.load_state_dict({"norms": [8.0, 1.0, 2.0, 3.0]})  # older still: one norm per update
    assert guard.state_dict()["votes"] == [[-1, 2.5]]
    with pytest.raises(ValueError, match=r"the update guard's saved state lacks \['direction'"):
        guard.load_state_dict({"votes": []})


def test_every_preset_takes_the_guard_and_is_guarded_by_default():
    for cls in PRESETS.values():
        assert cls().guard.factor == 3.0 and cls(guard=None).guard.factor is None


def _start(strategy, nodes, evaluate_fn=None):
    with task_identity():
        return run(strategy, nodes, max_delay=0, num_rounds=6, evaluate_fn=evaluate_fn)[0]


def _poisoned_fleet():
    nodes = quadratic_fleet(5, seed=21)
    attacker = next(k for k, n in nodes.items() if n.partition_id == ATTACKER)
    return {**nodes, attacker: PoisonedNode(nodes[attacker], ATTACKS["scaled-x1000"])}


def test_a_resumed_run_keeps_the_guards_window_bit_for_bit(tmp_path):
    def make(directory=None):
        return ASGD(
            clock=VirtualClock(seed=4, sigma=0.3),
            min_nodes=5,
            seed=1,
            eval_every=1,
            checkpoint_dir=directory,
            checkpoint_every=4 if directory else None,
        )

    full = _start(make(), _poisoned_fleet())
    with pytest.raises(Crash):
        _start(make(tmp_path), _poisoned_fleet(), crash_at(11))
    saved = Checkpointer(tmp_path, None).load()
    # One vote for each node, the attacker's too: one vote cannot move the median far.
    assert saved.num_updates == 8 and sorted(n for n, _ in saved.guard["votes"]) == [0, 1, 2, 3, 4]
    resumed = _start(make(tmp_path), _poisoned_fleet())
    assert resumed.rejected == full.rejected and resumed.faults == full.faults
    assert full.rejected["too-large"] >= 2
    np.testing.assert_array_equal(resumed.arrays["w"].numpy(), full.arrays["w"].numpy())


def test_a_second_start_begins_with_an_empty_window():
    strategy = ASGD(clock=VirtualClock(seed=4, sigma=0.3), min_nodes=5, seed=1)
    _start(strategy, quadratic_fleet(5, seed=21))
    assert strategy.guard.limit() is not None
    strategy.guard.load_state_dict({"norms": [[0, 1e-9]]})  # a window the next run must not inherit
    second = _start(strategy, quadratic_fleet(5, seed=21))
    assert second.rejected == {} and second.num_updates == 30


# ------------------------------------------------------------------ robust buffer combination
def _deltas(count, seed=0):
    rng = np.random.default_rng(seed)
    return [
        [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    ("combine", "trim"), [("median", 0.2), ("trimmed-mean", 0.2), ("trimmed-mean", 0.4)]
)
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_fedbuff_robust_steps_as_its_reference(combine, trim, momentum):
    agg = FedBuff(
        buffer_size=5,
        lr=0.5,
        server_momentum=momentum,
        staleness="constant",
        combine=combine,
        trim=trim,
    )
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
