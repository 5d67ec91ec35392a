"""The event loop on an in-memory grid with nodes that misbehave: faults, a node that leaves and
comes back, ClientApps without a query handler; and real-time mode."""

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet
from flwr.app import MetricRecord
from strategy_loop import (
    TRAIN,
    _identity,  # noqa: F401  (autouse: every test runs under task_identity())
    model,
    run,
)

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, GSGM, FedAsync


def test_faults_are_counted_and_the_model_stays_finite():
    modes = {1: "fail", 2: "nan", 3: "wrong_shape", 4: "silent"}
    nodes = quadratic_fleet(6, seed=8, modes=modes)
    grid = FakeGrid(nodes)
    strategy = ASGD(clock=VirtualClock(seed=1), min_nodes=6)
    result = strategy.start(grid, initial_arrays(), num_rounds=2, timeout=0.5, train_config=TRAIN)
    assert all(np.isfinite(a).all() for a in model(result))
    assert result.faults.get("error", 0) >= 1
    assert result.faults.get("timeout", 0) >= 1
    assert result.rejected.get("non-finite", 0) >= 1
    assert result.rejected.get("bad-shape", 0) >= 1
    assert result.num_updates == 12  # the good nodes fill the budget
    # failed nodes got work again after the model moved on
    assert nodes[[k for k, n in nodes.items() if n.partition_id == 1][0]].trained == 0
    assert sum(1 for n, kind in grid.log if kind == "train" and nodes[n].mode == "fail") > 1


def test_a_node_that_leaves_is_dropped_and_one_that_returns_gets_work():
    nodes = quadratic_fleet(4, seed=9)
    grid = FakeGrid(nodes)
    strategy = GSGM(clock=VirtualClock(seed=1), min_nodes=4, refresh_interval=0.0)
    calls = {"n": 0}
    leaving = sorted(nodes)[0]
    handler = grid.handlers[leaving]

    def evaluate(step, arrays):
        calls["n"] += 1
        if calls["n"] == 2:
            del grid.handlers[leaving]  # the node disappears from the grid
        if calls["n"] == 4:
            grid.handlers[leaving] = handler  # and comes back
        return MetricRecord({"accuracy": float(step)})

    result = strategy.start(
        grid, initial_arrays(), num_rounds=6, timeout=2, train_config=TRAIN, evaluate_fn=evaluate
    )
    assert result.faults.get("node-left", 0) == 1
    assert all(np.isfinite(a).all() for a in model(result))
    assert result.stopped_by == "budget"


def test_standard_clientapps_without_query_handler_still_work():
    nodes = quadratic_fleet(3, seed=10, modes={0: "no_query", 1: "no_query", 2: "no_query"})
    for node in nodes.values():
        node.mode = "no_query"
    result, grid = run(FedAsync(clock=VirtualClock(seed=0), min_nodes=3), nodes, num_rounds=2)
    assert result.num_updates == 6 and result.faults == {}
    # without a partition-id, a node's own id keys its state
    assert {r["stable-id"] for r in result.train_metrics_clientapp.values()} <= set(nodes)
    # one node was asked; its answer (Flower's "no query function") spared the others
    assert sum(1 for _, kind in grid.log if kind == "query") == 1


def test_an_app_without_query_handler_costs_one_query_and_one_line(caplog):
    nodes = quadratic_fleet(4, seed=10, modes=dict.fromkeys(range(4), "no_query"))
    with caplog.at_level("INFO", logger="flwr"):
        run(ASGD(clock=VirtualClock(seed=0), min_nodes=4), nodes, num_rounds=1)
    said = [r.getMessage() for r in caplog.records if "query" in r.getMessage()]
    assert len(said) == 1 and "no query handler" in said[0]
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_identify_nodes_false_sends_no_query():
    nodes = quadratic_fleet(2, seed=10)
    _, grid = run(
        ASGD(clock=VirtualClock(seed=0), min_nodes=2, identify_nodes=False), nodes, num_rounds=1
    )
    assert not [kind for _, kind in grid.log if kind == "query"]


def _query_batches(grid: FakeGrid) -> list[int]:
    """Record how many queries each ``push_messages`` call of ``grid`` carries."""
    batches, push = [], grid.push_messages

    def counting(messages):
        messages = list(messages)
        queries = sum(m.metadata.message_type == "query" for m in messages)
        if queries:
            batches.append(queries)
        return push(messages)

    grid.push_messages = counting
    return batches


@pytest.mark.parametrize(("identify", "expected"), [(True, [1, 4]), ("at-once", [5])])
def test_at_once_asks_every_node_in_one_push_and_changes_nothing_else(identify, expected):
    grid = FakeGrid(quadratic_fleet(5, seed=12))
    batches = _query_batches(grid)
    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=5, identify_nodes=identify)
    result = strategy.start(grid, initial_arrays(), num_rounds=2, timeout=2, train_config=TRAIN)
    assert batches == expected
    reference, _ = run(
        ASGD(clock=VirtualClock(seed=0), min_nodes=5), quadratic_fleet(5, seed=12), num_rounds=2
    )
    assert all(np.array_equal(a, b) for a, b in zip(model(result), model(reference), strict=True))


def test_identify_nodes_takes_only_true_false_or_at_once():
    with pytest.raises(
        ValueError, match=r"identify_nodes must be True, False or 'at-once', got 'yes'"
    ):
        ASGD(clock=VirtualClock(seed=0), identify_nodes="yes")


def test_real_time_mode_applies_in_arrival_order():
    nodes = quadratic_fleet(3, seed=11)
    result, _ = run(ASGD(min_nodes=3), nodes, num_rounds=3)
    assert result.num_updates == 9
    assert result.virtual_time == 0.0
