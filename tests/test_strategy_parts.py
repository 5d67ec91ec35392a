"""The event loop's collaborators, each on its own: task book, reply order, node registry,
checkpointer, recorder and task bases."""

import math

import numpy as np
import pytest
from fakegrid import FakeGrid, quadratic_fleet, task_identity
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

from fl_async import statefile
from fl_async.scheduling import ASP, SSP, VirtualClock, WhiteList
from fl_async.strategies import nodes as nodes_module
from fl_async.strategies import queries as queries_module
from fl_async.strategies.checkpoint import (
    SCHEMA,
    Checkpointer,
    CheckpointError,
    RunState,
    to_tree,
)
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.order import ArrivalOrder, VirtualOrder, reply_order
from fl_async.strategies.recorder import Recorder
from fl_async.strategies.tasks import Task, TaskBook


def task(node_id=1, version=0, *, finish=1.0, base=None, wall=0.0):
    return Task(
        node_id=node_id,
        stable_id=node_id,
        base_version=version,
        iteration=0,
        task_index=0,
        seed=0,
        start=0.0,
        finish=finish,
        dispatched_wall=wall,
        base=base,
    )


def reply_to(msg_id):
    with task_identity():
        message = Message(
            RecordDict({"metrics": MetricRecord({"n": 1})}), dst_node_id=1, message_type="train"
        )
        message.metadata.__dict__["_message_id"] = msg_id
        return Message(RecordDict(), reply_to=message)


def test_task_book_keeps_one_base_per_version_until_its_last_task_returns():
    book = TaskBook()
    params = [np.arange(3, dtype=np.float32)]
    book.add("a", task(1, 0), params)
    book.add("b", task(2, 0), params)
    params[0] += 10  # the live model moves on; the stored base does not
    book.add("c", task(3, 1), params)
    assert book.stored_bases == 2 and len(book) == 3
    _, base = book.close("a")
    np.testing.assert_array_equal(base[0], [0, 1, 2])
    assert book.stored_bases == 2  # "b" still uses version 0
    book.close("b")
    assert book.stored_bases == 1 and book.ids() == ["c"]


def test_task_book_stashes_replies_pulled_before_their_turn():
    book = TaskBook()
    book.add("a", task(1), [np.zeros(2, np.float32)])
    book.add("b", task(2), [np.zeros(2, np.float32)])
    book.stash("b", reply_to("b"))
    assert book.unanswered() == ["a"] and book.stashed("b") and book.stashed_replies == 1
    assert book.take_stashed("b").metadata.reply_to_message_id == "b"
    book.stash("a", reply_to("a"))
    book.close("a")  # closing a task forgets its stashed reply too
    assert book.stashed_replies == 0


def test_a_task_with_its_own_base_stores_no_version():
    book = TaskBook()
    own = [np.ones(2, np.float32)]
    book.add("a", task(1, base=own), [np.zeros(2, np.float32)])
    assert book.stored_bases == 0 and book.base_of(book["a"]) is own


def test_virtual_order_awaits_the_earliest_finish_and_moves_time_forward():
    order = reply_order(VirtualClock(seed=0))
    assert isinstance(order, VirtualOrder)
    book = TaskBook()
    for msg_id, finish in (("late", 5.0), ("early", 2.0)):
        book.add(msg_id, task(finish=finish), [np.zeros(1, np.float32)])
        order.track(msg_id, book[msg_id])
    assert order.wanted(book) == ["early"] and order.overdue(book, ["early"]) == "early"
    assert order.closed("early", book["early"], arrival=0.0, advance=True) == 2.0
    assert order.now == 2.0 and order.wanted(book) == ["late"]
    order.closed("late", book["late"], arrival=0.0, advance=False)  # a lost task: no time passes
    assert order.now == 2.0 and order.describe(0.0) == "virtual time 2.0"


def test_arrival_order_takes_any_reply_and_gives_up_on_the_oldest():
    order = reply_order(None)
    assert isinstance(order, ArrivalOrder)
    book = TaskBook()
    book.add("new", task(wall=20.0), [np.zeros(1, np.float32)])
    book.add("old", task(wall=10.0), [np.zeros(1, np.float32)])
    assert order.wanted(book) == ["new", "old"] and order.overdue(book, ["new", "old"]) == "old"
    start, finish = order.timing(1, 0, examples=10, model_bytes=4)
    assert math.isinf(finish) and start > 0 and order.now == 0.0


def test_registry_identifies_nodes_and_retires_one_that_keeps_failing(monkeypatch):
    fleet = quadratic_fleet(3, seed=0)
    registry = NodeRegistry(identify=True, poll_interval=0.001, max_failures=3)
    with task_identity():
        admitted, departed = registry.arrivals_and_departures(FakeGrid(fleet), timeout=5)
    assert sorted(admitted) == [0, 1, 2] and departed == [] and registry.order == [0, 1, 2]
    node = registry[registry.node_of(1)]
    assert node.partition_id == 1 and node.num_examples == 11
    # back-off: 1, 2, 4 server steps while others run; wall seconds when nothing does
    assert not registry.failed(node, version=10, why="boom")
    assert not registry.may_retry(node, 10, anything_in_flight=True)
    assert registry.may_retry(node, 11, anything_in_flight=True)
    assert not registry.failed(node, version=11, why="boom")
    assert not registry.may_retry(node, 12, anything_in_flight=True)
    monkeypatch.setattr(nodes_module.time, "time", lambda: node.failed_wall + 0.25)
    assert registry.may_retry(node, 11, anything_in_flight=False)  # 0.2 s have passed
    assert registry.rejected(node, "update rejected: non-finite")  # the third strike
    assert node.retired and registry.usable == 2
    assert [stable for stable, _ in registry.candidates()] == [0, 2]


class FakeClock:
    """``time`` for the queries module: ``sleep`` moves ``time()`` on and nothing waits, so
    the quiet period is measured on this clock, whatever the machine's load."""

    def __init__(self):
        self.now = 0.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class TricklingGrid(FakeGrid):
    """Answers come one per pull, ``gap`` seconds of ``clock`` apart, as from many nodes on
    few actors."""

    def __init__(self, handlers, gap, clock):
        super().__init__(handlers, max_delay=0)
        self.gap, self.clock = gap, clock

    def pull_messages(self, message_ids):
        self.clock.sleep(self.gap)
        return list(super().pull_messages(list(message_ids)[:1]))


def test_the_identify_query_waits_while_answers_keep_coming(monkeypatch):
    """20 answers 0.05 s apart take 1 s: more than the quiet period (0.3 s) but each comes
    within it, so every node is identified (no node falls back to its random node id)."""
    monkeypatch.setattr(queries_module, "QUERY_QUIET", 0.3)
    monkeypatch.setattr(queries_module, "time", clock := FakeClock())
    registry = NodeRegistry(identify=True, poll_interval=0.001, max_failures=3)
    with task_identity():
        admitted, _ = registry.arrivals_and_departures(
            TricklingGrid(quadratic_fleet(20, seed=0), gap=0.05, clock=clock), timeout=30
        )
    assert sorted(admitted) == list(range(20))
    assert clock.now >= 20 * 0.05  # the answers took longer than the quiet period


def test_the_identify_query_gives_up_on_a_silent_node_after_the_quiet_period(monkeypatch):
    monkeypatch.setattr(queries_module, "QUERY_QUIET", 0.3)
    monkeypatch.setattr(queries_module, "time", clock := FakeClock())
    fleet = quadratic_fleet(4, seed=0, modes={2: "silent"})
    registry = NodeRegistry(identify=True, poll_interval=0.001, max_failures=3)
    with task_identity():
        admitted, _ = registry.arrivals_and_departures(FakeGrid(fleet), timeout=30)
    assert 0.3 <= clock.now < 0.4  # the quiet period after the last answer, not the timeout
    silent = next(node_id for node_id, node in fleet.items() if node.partition_id == 2)
    assert sorted(admitted) == sorted([0, 1, 3, silent])  # keyed by its node id


def test_a_readable_accepted_reply_clears_a_nodes_record():
    registry = NodeRegistry(identify=False, poll_interval=0.01, max_failures=2)
    with task_identity():
        registry.arrivals_and_departures(FakeGrid(quadratic_fleet(1)), timeout=1)
    node = next(iter(registry.nodes.values()))
    registry.failed(node, 0, "boom")
    registry.answered(node, 12, accepted=True)
    assert (node.failures, node.strikes, node.failed_at, node.num_examples) == (0, 0, None, 12)
    assert not registry.failed(node, 0, "boom")  # one strike only: the count started again


def test_checkpointer_saves_atomically_and_refuses_another_schema(tmp_path):
    checkpointer = Checkpointer(tmp_path, every=3)
    assert checkpointer.load() is None and not checkpointer.due(2) and checkpointer.due(3)
    state = RunState(
        keys=["w"],
        aggregator={},
        policy={},
        clock=None,
        order={"now": 1.5},
        task_bases={},
        num_updates=4,
        num_replies=5,
        faults={},
        last_eval_step=0,
        train_config={},
        nodes={},
        forget_at={},
        in_flight=[],
        train_metrics={},
        evaluate_metrics={},
        grid_metrics={},
    )
    checkpointer.save(state, version=3)
    assert checkpointer.load() == state and state.schema == SCHEMA
    assert not checkpointer.due(5) and sorted(p.name for p in tmp_path.iterdir()) == [
        "fl-async-checkpoint.state",
        "fl-async-history.state",
    ]
    older = to_tree(state) | {"schema": 2}
    checkpointer.path.write_bytes(statefile.dumps(older))
    with pytest.raises(CheckpointError, match="schema 2; this fl-async reads schemas 3 and 4"):
        checkpointer.load()


def test_recorder_counts_progress_and_builds_the_result():
    recorder = Recorder()
    recorder.reply({"server-step": 1}, accepted=True)
    recorder.reply({"server-step": 1}, accepted=False)
    recorder.task_failed()
    assert (recorder.num_updates, recorder.num_replies, recorder.since_progress) == (1, 2, 2)
    assert recorder.result.train_metrics_clientapp[2]["accepted"] == 0
    recorder.fault("error", "node 1: boom")
    recorder.evaluation(1, MetricRecord({"accuracy": 0.5}), now=3.0, when="virtual time 3.0")
    assert recorder.evaluated(1) and recorder.reached(0.5, "accuracy")
    assert not recorder.reached(0.6, "accuracy")
    result = recorder.finish(
        "no-progress", "2 tasks", ArrayRecord(), rejected={"x": 1}, server_steps=1, now=3.0
    )
    assert result.faults == {"error": 1} and not result.completed
    assert (result.stopped_by, result.stop_detail, result.virtual_time) == (
        "no-progress",
        "2 tasks",
        3.0,
    )


def test_asgd_slack_paces_it_with_gsgms_white_list() -> None:
    from fl_async.app import server_run
    from fl_async.app.config import parse_run_config
    from fl_async.scheduling import Asynchronous, WhiteList
    from fl_async.strategies import ASGD

    assert type(ASGD().policy) is Asynchronous
    paced = ASGD(slack=20)
    assert type(paced.policy) is WhiteList and paced.policy.staleness_bound == 20
    built = server_run.build_strategy(
        parse_run_config({"strategy": "asgd", "asgd.slack": 3}), clock=None
    )
    assert type(built.policy) is WhiteList and built.policy.staleness_bound == 3
    with pytest.raises(ValueError, match="slack"):
        ASGD(slack=-1)


class _CountingDict(dict):
    """A dict that counts item look-ups."""

    lookups = 0

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)


def test_registry_offers_idle_nodes_without_a_pass_over_the_busy_ones():
    fleet = quadratic_fleet(50, seed=0)
    registry = NodeRegistry(identify=True, poll_interval=0.001, max_failures=1)
    grid = FakeGrid(fleet)
    with task_identity():
        registry.arrivals_and_departures(grid, timeout=5)
    for stable in range(50):
        registry.set_busy(registry[registry.node_of(stable)], True)
    for stable in (31, 7, 12):
        registry.set_busy(registry[registry.node_of(stable)], False)
    registry.nodes = _CountingDict(registry.nodes)
    assert [stable for stable, _ in registry.candidates()] == [7, 12, 31]
    assert registry.nodes.lookups == 3  # the 47 busy nodes are not looked at
    # a retired node is neither offered nor counted as usable, also once it is idle again
    retiring = registry[registry.node_of(12)]
    assert registry.rejected(retiring, "update rejected: non-finite")
    registry.set_busy(retiring, False)
    assert [stable for stable, _ in registry.candidates()] == [7, 31] and registry.usable == 49
    # departures: the retired node's count and the idle node's place go with them
    del grid.handlers[registry.node_of(12)], grid.handlers[registry.node_of(7)]
    gone = registry.node_of(7)
    _, departed = registry.arrivals_and_departures(grid, timeout=5)
    assert sorted(n.stable_id for _, n in departed) == [7, 12] and registry.usable == 48
    registry.set_busy(dict(departed)[gone], False)  # a late reply from a node that has left
    assert [stable for stable, _ in registry.candidates()] == [31] and 7 not in registry.order


@pytest.mark.parametrize(
    "policy",
    [WhiteList(slack=0), SSP(1), ASP(staleness_bound=0, period=3)],
    ids=["WhiteList", "SSP", "ASP"],
)
def test_policy_index_follows_the_registry_idle_nodes(policy):
    """The dispatch reads the idle nodes that may start from the policy's index: over random
    dispatches, replies, failures, retirements, departures and returns it names exactly the
    nodes that asking ``may_start`` of each of the registry's idle nodes would."""
    fleet = quadratic_fleet(12, seed=1)
    grid = FakeGrid(dict(fleet))
    registry = NodeRegistry(
        identify=True, poll_interval=0.001, max_failures=2, on_idle=policy.set_idle
    )
    rng = np.random.default_rng(0)
    version = 0

    def admit():
        with task_identity():
            admitted, departed = registry.arrivals_and_departures(grid, timeout=5)
        for stable in admitted:
            policy.join(stable)
        for _, node in departed:
            policy.leave(node.stable_id)

    admit()
    for _ in range(600):
        nodes = list(registry.nodes.values())
        node = nodes[rng.integers(len(nodes))]
        op = rng.choice(["start", "answer", "answer", "fail", "reject", "depart", "return"])
        if op == "start" and not node.busy and not node.retired:
            policy.started(node.stable_id, version)
            registry.set_busy(node, True)
        elif op == "answer" and node.busy:
            registry.set_busy(node, False)
            policy.finished(node.stable_id, duration=float(rng.choice([0.5, 1.0, 4.0])))
            registry.answered(node, 10, accepted=True)
            version += 1
        elif op == "fail" and node.busy:
            registry.failed(node, version, "error")
            policy.leave(node.stable_id)
        elif op == "reject" and registry.rejected(node, "update rejected: non-finite"):
            policy.leave(node.stable_id)
        elif op == "depart" and len(registry) > 2:
            del grid.handlers[next(i for i, n in registry.nodes.items() if n is node)]
            admit()
        elif op == "return":
            grid.handlers.update(fleet)
            admit()
        for v in (max(version - 3, 0), version):
            scan = [s for s, _ in registry.candidates() if policy.may_start(s, v)]
            assert list(policy.startable(v)) == scan
