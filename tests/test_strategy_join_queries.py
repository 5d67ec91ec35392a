"""A node that joins while the run goes on is asked for its partition-id without the run waiting
for the answer: the other nodes' replies go on being applied, the node is admitted once it
answers, keyed by its node id once ``QUERY_QUIET`` passes without an answer, and forgotten if it
leaves first. (The start still waits for its nodes' answers.)"""

import numpy as np
from fakegrid import FakeGrid, QuadraticNode, initial_arrays, quadratic_fleet
from flwr.app import MetricRecord
from strategy_loop import (
    TRAIN,
    _identity,  # noqa: F401  (autouse: every test runs under task_identity())
    records,
)

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD
from fl_async.strategies import queries as queries_module
from fl_async.strategies.nodes import NodeRegistry

JOINER = 10**9 + 7
"""The node id of the node that joins during the run."""


class QuerySilent:
    """A node that never answers the identify query, and trains as ``node`` otherwise."""

    def __init__(self, node: QuadraticNode) -> None:
        self.node = node

    def __call__(self, message):
        return None if message.metadata.message_type == "query" else self.node(message)


class SlowQueryGrid(FakeGrid):
    """A grid on which the identify query to ``slow`` is answered only after ``hold`` pulls."""

    def __init__(self, handlers, *, slow: int, hold: int) -> None:
        super().__init__(handlers, max_delay=0)
        self.slow, self.hold = slow, hold

    def push_messages(self, messages):  # noqa: D102
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for message, msg_id in zip(messages, ids, strict=True):
            meta = message.metadata
            if meta.dst_node_id == self.slow and meta.message_type == "query":
                self._pending[msg_id][1] = self.hold
        return ids


def joining_at(grid: FakeGrid, handler, *, evaluation: int):
    """An ``evaluate_fn`` that connects ``handler`` as node ``JOINER`` at its ``evaluation``-th
    call: a node that joins while the run goes on."""
    calls = {"n": 0}

    def evaluate(step, arrays):
        calls["n"] += 1
        if calls["n"] == evaluation:
            grid.handlers[JOINER] = handler
        return MetricRecord({"accuracy": float(step)})

    return evaluate


def start(grid, evaluate, *, num_rounds=6, timeout=30.0):
    strategy = ASGD(clock=VirtualClock(seed=1), min_nodes=3, refresh_interval=0.0, eval_every=1)
    return strategy.start(
        grid,
        initial_arrays(),
        num_rounds=num_rounds,
        timeout=timeout,
        train_config=TRAIN,
        evaluate_fn=evaluate,
    )


def joiner(partition_id: int = 3) -> QuadraticNode:
    return QuadraticNode(partition_id, np.ones(5, np.float32), num_examples=13)


def test_a_node_that_joins_and_never_answers_its_query_holds_up_no_other_node(monkeypatch):
    """Waiting for its answer (as the start does) would hold the run for the query's quiet
    period, here the 30-s timeout; the run spends its budget on the other nodes instead."""
    grid = FakeGrid(quadratic_fleet(3, seed=3))
    waited_for: list[int] = []  # the node ids of every query the run waited for
    ask_and_wait = queries_module.ask_and_wait

    def recorded(grid, node_ids, **kwargs):
        waited_for.extend(node_ids)
        return ask_and_wait(grid, node_ids, **kwargs)

    monkeypatch.setattr(queries_module, "ask_and_wait", recorded)
    result = start(grid, joining_at(grid, QuerySilent(joiner()), evaluation=2))
    assert sorted(waited_for) == sorted(n for n in grid.handlers if n != JOINER)  # the start's
    assert result.stopped_by == "budget" and result.num_updates == 18
    assert (JOINER, "query") in grid.log and (JOINER, "train") not in grid.log
    assert {r["stable-id"] for r in records(result)} == {0, 1, 2}


def test_a_node_slow_to_answer_is_admitted_once_it_answers_while_the_others_train():
    grid = SlowQueryGrid(quadratic_fleet(3, seed=3), slow=JOINER, hold=4)
    result = start(grid, joining_at(grid, joiner(), evaluation=2), num_rounds=10)
    assert result.stopped_by == "budget"
    asked = grid.log.index((JOINER, "query"))
    first_task = grid.log.index((JOINER, "train"))
    between = [node for node, kind in grid.log[asked:first_task] if kind == "train"]
    assert between, "no other node got work while the new node's answer was awaited"
    assert 3 in {r["stable-id"] for r in records(result)}  # keyed by its partition-id


def _registry_with_three_nodes(grid: FakeGrid) -> NodeRegistry:
    registry = NodeRegistry(identify=True, poll_interval=0.001, max_failures=3)
    admitted, _ = registry.arrivals_and_departures(grid, timeout=5)
    assert sorted(admitted) == [0, 1, 2]
    return registry


def test_the_registry_admits_an_asked_node_at_the_look_after_its_answer():
    grid = SlowQueryGrid(quadratic_fleet(3, seed=3), slow=JOINER, hold=2)
    registry = _registry_with_three_nodes(grid)
    grid.handlers[JOINER] = joiner()
    assert registry.arrivals_and_departures(grid, timeout=5, wait=False) == ([], [])
    assert registry.admit_answered(grid) == [] and registry.admit_answered(grid) == []
    assert registry.admit_answered(grid) == [3] and registry.order == [0, 1, 2, 3]
    # asked once: a look while its query is in flight does not ask again
    registry.arrivals_and_departures(grid, timeout=5, wait=False)
    assert grid.log.count((JOINER, "query")) == 1


def test_an_asked_node_is_keyed_by_its_node_id_after_the_quiet_period(monkeypatch):
    grid = FakeGrid(quadratic_fleet(3, seed=3))
    registry = _registry_with_three_nodes(grid)
    grid.handlers[JOINER] = QuerySilent(joiner())
    clock = [1000.0]  # the queries' clock, moved by hand
    monkeypatch.setattr(queries_module.time, "time", lambda: clock[0])
    registry.arrivals_and_departures(grid, timeout=300, wait=False)
    clock[0] += queries_module.QUERY_QUIET - 1
    assert registry.admit_answered(grid) == []
    clock[0] += 1
    assert registry.admit_answered(grid) == [JOINER]
    # at most the timeout, when that is shorter
    grid.handlers[JOINER + 1] = QuerySilent(joiner(4))
    registry.arrivals_and_departures(grid, timeout=5, wait=False)
    clock[0] += 5
    assert registry.admit_answered(grid) == [JOINER + 1]


def test_a_node_that_leaves_before_it_answers_is_forgotten_and_asked_again_when_back():
    grid = FakeGrid(quadratic_fleet(3, seed=3), max_delay=0)
    registry = _registry_with_three_nodes(grid)
    grid.handlers[JOINER] = QuerySilent(joiner())
    registry.arrivals_and_departures(grid, timeout=5, wait=False)
    handler = grid.handlers.pop(JOINER)
    registry.arrivals_and_departures(grid, timeout=5, wait=False)
    assert registry.admit_answered(grid) == [] and JOINER not in registry.nodes
    grid.handlers[JOINER] = handler.node  # back, and answering now
    registry.arrivals_and_departures(grid, timeout=5, wait=False)
    assert grid.log.count((JOINER, "query")) == 2
    assert registry.admit_answered(grid) == [3]
