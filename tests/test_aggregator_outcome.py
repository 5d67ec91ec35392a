"""``apply`` says what it did with each update: an ``Outcome`` with a status (and a reason)."""

import numpy as np
import pytest

from fl_async.aggregators import (
    AGGREGATORS,
    APPLIED,
    ASGD,
    HELD,
    REJECTED,
    STEPPED,
    ClientUpdate,
    FedBuff,
    Outcome,
)
from fl_async.validation import InvalidArgument

STEPS_BY_ITSELF = ["asgd", "dcasgd", "fedasync", "gsgm", "trendsmooth"]


def update(node, value=0.1, iteration=0):
    params = [np.ones(3, np.float32)]
    delta = [np.full(3, value, np.float32)]
    return ClientUpdate(node_id=node, delta=delta, base=params, iteration=iteration)


def test_outcome_properties():
    assert Outcome(APPLIED).accepted and Outcome(APPLIED).stepped
    assert Outcome(STEPPED).accepted and Outcome(STEPPED).stepped
    assert Outcome(HELD).accepted and not Outcome(HELD).stepped
    rejected = Outcome(REJECTED, "non-finite")
    assert not rejected.accepted and not rejected.stepped
    assert rejected.reason == "non-finite" and Outcome(HELD).reason is None


def test_outcome_has_no_truth_value_of_its_own():
    """Callers must say what they mean (``accepted`` or ``stepped``), not ``if outcome:``."""
    assert "__bool__" not in vars(Outcome) and "__len__" not in vars(Outcome)


@pytest.mark.parametrize(
    ("status", "reason"), [("done", None), (REJECTED, None), (APPLIED, "overflow")]
)
def test_outcome_refuses_inconsistent_fields(status, reason):
    with pytest.raises(InvalidArgument):
        Outcome(status, reason)


@pytest.mark.parametrize("name", STEPS_BY_ITSELF)
def test_rules_that_step_on_each_update_say_applied(name):
    agg = AGGREGATORS[name]()
    agg.init([np.ones(3, np.float32)])
    for k in range(3):
        assert agg.apply(update(k)) == Outcome(APPLIED)
    assert agg.version == 3


def test_fedbuff_holds_until_the_kth_update_steps():
    agg = FedBuff(buffer_size=3)
    agg.init([np.ones(3, np.float32)])
    statuses = [agg.apply(update(k)).status for k in range(6)]
    assert statuses == [HELD, HELD, STEPPED, HELD, HELD, STEPPED]
    assert agg.version == 2


@pytest.mark.parametrize("name", ["ssgd", "odsgd"])
def test_barrier_rules_hold_every_update(name):
    agg = AGGREGATORS[name]()
    agg.init([np.ones(3, np.float32)])
    assert [agg.apply(update(k)).status for k in range(3)] == [HELD] * 3
    assert agg.version == 0 and agg.held == 3


def test_a_rejection_names_its_reason():
    agg = ASGD()
    agg.init([np.ones(3, np.float32)])
    outcome = agg.apply(update(1, value=np.nan))
    assert outcome == Outcome(REJECTED, "non-finite")
    assert agg.num_rejected == {"non-finite": 1}
