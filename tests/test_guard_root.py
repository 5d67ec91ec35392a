"""The update guard's reference update (docs/algorithms.md, The update guard): the cache of each
base version's reference, and the decision by the cosine with it. No grid: a made-up reference."""

import numpy as np
import pytest

from fl_async.aggregators import ClientUpdate, UpdateGuard
from fl_async.aggregators.guard_root import AGREE, DOUBT, TRUST, ReferenceCache, doubted
from fl_async.validation import InvalidArgument

MODEL = [np.zeros(4, np.float32), np.array(0, np.int64)]
TOWARDS = np.array([1.0, 1.0, 0.0, 0.0], np.float32)
"""The reference's direction: what training on the root set would do from any base."""


class Counted:
    """A reference update ``TOWARDS`` (``base``'s integer array as zero), counting its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, base, version):
        self.calls.append(version)
        return [TOWARDS * (1 + version), np.zeros_like(base[1])]


def update(direction, node=0, scale=1.0):
    delta = np.float32(scale) * np.array(direction, np.float32)
    return ClientUpdate(node_id=node, delta=[delta, np.array(1)])


def guarded(trust=TRUST):
    """A guard with the reference ``Counted``, opened by three updates along it."""
    reference = Counted()
    guard = UpdateGuard(reference=reference, trust=trust)
    guard.begin(5)
    held = [update((1, 1, 0, 0), node) for node in range(3)]
    roots = [guard.check(u, MODEL, (MODEL, 0)).cosine for u in held]
    assert roots == [pytest.approx(1.0)] * 3
    verdicts = guard.open([(u, guard.measure(u, MODEL)) for u in held], roots)
    assert not any(v.refused for v in verdicts)
    return guard, reference


def test_each_base_versions_reference_is_made_once_and_the_recent_ones_kept():
    made = Counted()
    cache = ReferenceCache(made, keep=2)
    first, norm = cache.get(MODEL, 0)
    assert len(first) == 1 and norm == pytest.approx(np.sqrt(2))  # floating arrays only
    cache.get(MODEL, 0)
    cache.get(MODEL, 1)
    cache.get(MODEL, 0)  # 0 used last: 1 is the one dropped for 2
    cache.get(MODEL, 2)
    cache.get(MODEL, 0)
    assert made.calls == [0, 1, 2] and cache.computed == 3
    cache.get(MODEL, 1)
    assert made.calls == [0, 1, 2, 1]
    cache.clear()
    cache.get(MODEL, 0)
    assert made.calls[-1] == 0 and cache.computed == 5


def test_the_cosine_is_with_the_reference_of_the_updates_own_base():
    cache = ReferenceCache(Counted())
    floats = [np.array([1.0, 0.0, 0.0, 0.0], np.float32)]
    assert cache.cosine(floats, 1.0, MODEL, 3) == pytest.approx(1 / np.sqrt(2))
    assert cache.cosine(floats, 0.0, MODEL, 3) is None  # nothing to judge a direction by
    zero = ReferenceCache(lambda base, version: [np.zeros(4, np.float32), base[1]])
    assert zero.cosine(floats, 1.0, MODEL, 0) is None


def test_an_update_at_most_trust_in_cosine_is_refused_one_in_doubt_down_weighted():
    guard, reference = guarded(trust=TRUST)
    base = (MODEL, 7)
    flipped = guard.check(update((-1, -1, 0, 0), 3, scale=5.0), MODEL, base)
    assert flipped.reason == "wrong-direction" and flipped.cosine == pytest.approx(-1.0)
    # A right angle is in doubt: it counts at most DOUBT x (0 - trust) / (AGREE - trust) x M.
    sideways = guard.check(update((0, 0, 1, 0), 4), MODEL, base)
    median = sideways.median
    assert not sideways.refused and sideways.cosine == 0.0
    cap = DOUBT * (0 - TRUST) / (AGREE - TRUST)
    assert sideways.scale == pytest.approx(cap * median / 1.0) and doubted(0.0, TRUST) == cap
    partly = guard.check(update((1, -0.5, 1, 0), 5), MODEL, base)  # cos 0.24: agrees
    assert not partly.refused and partly.scale == 1.0
    large = guard.check(update((1, 0.5, 0, 0), 6, scale=10.0), MODEL, base)
    assert large.scale == pytest.approx(3 * np.sqrt(2) / (10 * np.sqrt(1.25)), rel=1e-5)
    assert reference.calls == [0, 7]  # one reference per base version
    strict = guarded(trust=0.0)[0]
    assert strict.check(update((0, 0, 1, 0), 4), MODEL, base).reason == "wrong-direction"
    assert doubted(0.5, TRUST) == np.inf and doubted(TRUST, TRUST) == 0.0


def test_without_a_base_or_with_a_zero_reference_the_direction_test_judges():
    guard, _ = guarded()
    assert not guard.check(update((-1, -1, 0, 0), 3), MODEL).refused  # no base: not judged
    zero = UpdateGuard(reference=lambda base, version: [np.zeros(4, np.float32), base[1]])
    assert zero.check(update((1, 0, 0, 0)), MODEL, (MODEL, 0)).cosine is None


def test_the_held_updates_are_judged_by_their_reference_cosine_at_the_opening():
    guard = UpdateGuard(reference=Counted())
    guard.begin(3)
    held = [update((1, 1, 0, 0), 0), update((-1, -1, 0, 0), 1, 4.0), update((1, 0, 0, 0), 2)]
    roots = [guard.check(u, MODEL, (MODEL, 0)).cosine for u in held]
    verdicts = guard.open([(u, guard.measure(u, MODEL)) for u in held], roots)
    assert [v.reason for v in verdicts] == [None, "wrong-direction", None]


def test_a_new_run_forgets_the_references_and_the_settings_are_checked():
    guard, reference = guarded()
    guard.reset()
    guard.begin(5)
    guard.check(update((1, 1, 0, 0), 0), MODEL, (MODEL, 0))
    assert reference.calls == [0, 0]
    assert guard.hyperparameters()["trust"] == TRUST
    assert "trust" not in UpdateGuard().hyperparameters()
    with pytest.raises(InvalidArgument, match="trust must be a finite number"):
        UpdateGuard(reference=Counted(), trust=1.5)
    with pytest.raises(InvalidArgument, match="reference must be a callable"):
        UpdateGuard(reference=3)


def test_the_opening_verdicts_keep_their_cosine_and_doubt_through_a_checkpoint():
    guard = UpdateGuard(reference=Counted())
    guard.begin(3)
    held = [update((1, 1, 0, 0), 0), update((0, 0, 1, 0), 1), update((1, 0, 0, 0), 2)]
    roots = [guard.check(u, MODEL, (MODEL, 0)).cosine for u in held]
    verdicts = guard.open([(u, guard.measure(u, MODEL)) for u in held], roots)
    assert [v.doubted for v in verdicts] == [False, True, False]
    resumed = UpdateGuard(reference=Counted())
    resumed.load_state_dict(guard.state_dict())
    assert [resumed.take_queued(n) for n in range(3)] == verdicts
    old = guard.state_dict()  # saved before the reference: five fields a verdict
    old["queued"] = [v[:5] for v in old["queued"]]
    resumed.load_state_dict(old)
    assert resumed.take_queued(1) is None and resumed.take_queued(0).cosine is None
