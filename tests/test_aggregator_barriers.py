"""The barrier contract (``held``, ``joins_step``, ``flush``): the event loop asks it of every
rule, so it never needs to know which rule it runs."""

import logging
import pickle

import numpy as np
import pytest

from fl_async.aggregators import (
    AGGREGATORS,
    HELD,
    ODSGD,
    SSGD,
    ClientUpdate,
    FedBuff,
    Outcome,
)

W0 = [1.0, 2.0]


def arr(values):
    return np.array(values, dtype=np.float32)


def upd(node, delta, iteration=0, num_examples=1):
    return ClientUpdate(
        node_id=node, delta=[arr(delta)], base=None, iteration=iteration, num_examples=num_examples
    )


@pytest.mark.parametrize("name", sorted(set(AGGREGATORS) - {"ssgd", "odsgd", "fedcompass"}))
def test_rules_without_a_barrier_hold_nothing_for_one(name):
    agg = AGGREGATORS[name]()
    agg.init([arr(W0)])
    agg.apply(ClientUpdate(node_id=1, delta=[arr([0.1, 0.1])], base=[arr(W0)]))
    assert agg.held == 0
    assert not agg.joins_step(base_version=agg.version, iteration=agg.version)
    version = agg.version
    assert not agg.flush() and agg.version == version


def test_fedcompass_holds_every_update_until_a_flush_without_a_plan():
    """FedCompass's steps are its policy's (tests/test_fedcompass.py); alone it is a barrier
    whose step no task in flight joins (the policy's ``owes`` says when it is due)."""
    agg = AGGREGATORS["fedcompass"](alpha=1.0)
    agg.init([arr(W0)])
    assert agg.apply(upd(1, [0.5, 0.5])) == Outcome(HELD) and agg.held == 1
    assert not agg.joins_step(base_version=0, iteration=0)
    assert agg.flush() and agg.version == 1 and agg.held == 0 and not agg.flush()
    np.testing.assert_array_equal(agg.params[0], arr([0.5, 1.5]))


def test_fedbuff_buffer_is_not_a_barrier():
    """FedBuff's buffer steps by itself when full: its count stays out of ``held``."""
    agg = FedBuff(buffer_size=3)
    agg.init([arr(W0)])
    assert agg.apply(upd(1, [1.0, 1.0])) == Outcome(HELD)
    assert agg.count == 1 and agg.held == 0 and not agg.flush() and agg.version == 0


def test_ssgd_joins_by_base_version():
    agg = SSGD()
    agg.init([arr(W0)])
    assert agg.joins_step(base_version=0, iteration=5)
    agg.apply(upd(1, [1.0, 1.0]))
    assert agg.flush() and agg.version == 1
    assert not agg.joins_step(base_version=0, iteration=1)
    assert agg.joins_step(base_version=1, iteration=0)


def test_odsgd_joins_by_iteration():
    agg = ODSGD()
    agg.init([arr(W0)])
    assert agg.joins_step(base_version=7, iteration=0)
    assert not agg.joins_step(base_version=0, iteration=1)
    agg.apply(upd(1, [1.0, 1.0], iteration=0))
    assert agg.flush()
    assert agg.joins_step(base_version=0, iteration=1)
    assert not agg.joins_step(base_version=1, iteration=0)


def test_flush_with_nothing_held_takes_no_step():
    for agg in (SSGD(), ODSGD()):
        agg.init([arr(W0)])
        assert agg.held == 0 and not agg.flush() and agg.version == 0


def test_ssgd_step_that_would_overflow_is_taken_with_the_model_unchanged(caplog):
    agg = SSGD(lr=1.0)
    agg.init([arr([3e38, 1.0]), np.array(10, dtype=np.int64)])
    base = [arr([3e38, 1.0]), np.array(10, dtype=np.int64)]
    for node in (2, 1):  # mean delta [-3e38, 0]: w - mean overflows
        delta = [arr([-3e38, 0.0]), np.array(-1, dtype=np.int64)]
        assert agg.apply(ClientUpdate(node_id=node, delta=delta, base=base)).status == HELD
    with caplog.at_level(logging.WARNING):
        assert agg.flush()
    assert agg.version == 1 and agg.held == 0
    assert agg.num_rejected == {"overflow": 2}
    np.testing.assert_array_equal(agg.params[0], arr([3e38, 1.0]))
    assert agg.params[1] == 10  # the rejected updates' other arrays are dropped with them
    assert "nodes [1, 2]" in caplog.text and "overflow" in caplog.text
    # the barrier goes on: the next step is an ordinary one
    agg.apply(ClientUpdate(node_id=1, delta=[arr([1e38, 0.5]), np.array(-1)], base=base))
    assert agg.flush() and agg.version == 2
    np.testing.assert_array_equal(agg.params[0], arr([3e38, 1.0]) - arr([1e38, 0.5]))
    assert agg.params[1] == 11


def test_odsgd_step_that_would_overflow_is_taken_and_the_next_iteration_promoted():
    agg = ODSGD(lr=1.0)
    agg.init([arr([3e38, 1.0])])
    assert agg.apply(upd(1, [-3e38, 0.0], iteration=0)).status == HELD
    assert agg.apply(upd(1, [1.0, 1.0], iteration=1)).status == HELD  # runs ahead
    assert agg.apply(upd(2, [-3e38, 0.0], iteration=0)).status == HELD
    assert agg.flush()
    assert agg.version == 1 and agg.num_rejected == {"overflow": 2}
    np.testing.assert_array_equal(agg.params[0], arr([3e38, 1.0]))
    assert agg.held == 1 and agg.pending_iterations == []  # iteration 1's buffer is promoted
    assert agg.apply(upd(2, [3.0, 3.0], iteration=1)).status == HELD
    assert agg.flush() and agg.version == 2  # mean [2, 2]
    np.testing.assert_array_equal(agg.params[0], arr([3e38 - 2.0, -1.0]))


def test_odsgd_rejection_of_a_later_iteration_leaves_no_empty_buffer():
    agg = ODSGD()
    agg.init([arr(W0)])
    outcome = agg.apply(upd(1, [np.nan, 0.0], iteration=3))
    assert outcome.reason == "non-finite" and agg.pending_iterations == []


def test_odsgd_state_round_trip_keeps_later_iterations():
    agg = ODSGD(lr=0.5)
    agg.init([arr(W0)])
    agg.apply(upd(1, [1.0, 1.0], iteration=0))
    agg.apply(upd(1, [2.0, 0.0], iteration=1))
    agg.apply(upd(2, [0.5, 0.5], iteration=2))
    resumed = ODSGD(lr=0.5)
    resumed.load_state_dict(pickle.loads(pickle.dumps(agg.state_dict())))
    assert resumed.held == 1 and resumed.pending_iterations == [1, 2]
    for a in (agg, resumed):
        a.apply(upd(2, [3.0, 3.0], iteration=0))
        assert a.flush() and a.flush() and a.flush() and not a.flush()
    assert resumed.version == agg.version == 3
    np.testing.assert_array_equal(resumed.params[0], agg.params[0])


def test_a_saved_ssgd_state_with_num_nodes_still_loads():
    agg = SSGD()
    agg.init([arr(W0)])
    agg.apply(upd(1, [1.0, 1.0]))
    state = agg.state_dict()
    assert "num_nodes" not in state["state"] and "num_nodes" not in state["hyperparameters"]
    state["state"]["num_nodes"] = 4  # as saved before the barrier contract
    resumed = SSGD()
    resumed.load_state_dict(state)
    assert resumed.held == 1 and resumed.flush()
    np.testing.assert_array_equal(resumed.params[0], arr([0.0, 1.0]))
