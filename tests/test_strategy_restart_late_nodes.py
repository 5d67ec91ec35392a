"""A run resumed while a node that held a task in flight at the checkpoint is not back yet.

After a SuperLink restart the nodes reconnect on their own, each after its own back-off, and
tell their stable ids only when asked: a resumed run may start before some are back. Their saved
tasks wait for them (up to the task timeout) instead of being given up at once: with a virtual
clock the resumed run waits for them before handling any reply, so its history is still the
uninterrupted run's; without one the task is sent when its node shows up. A node that never
comes back loses its task after the timeout, and the run goes on without it. A node listed but
not there yet (its identify query comes back as Flower's "node unavailable") is asked again when
next listed, instead of being keyed by its node id for good.
"""

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from fakegrid import Crash, FakeGrid, crash_at, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, Error, Message
from strategy_loop import history, records

from fl_async import statefile
from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD
from fl_async.strategies.checkpoint import FILENAME, Checkpointer, CheckpointError, to_tree
from fl_async.strategies.nodes import QUERY_ATTEMPTS

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
NUM_NODES, NUM_ROUNDS, EVERY, CRASH_AT, TIMEOUT = 4, 5, 3, 7, 5.0


class LateGrid(FakeGrid):
    """A grid on which ``late`` is listed only from the ``after``-th look at the node list on
    (never, with ``after=None``)."""

    def __init__(self, handlers, *, late: int, after: int | None) -> None:
        super().__init__(handlers)
        self.late, self.after, self.looks = late, after, 0

    def get_node_ids(self):  # noqa: D102
        self.looks += 1
        back = self.after is not None and self.looks >= self.after
        return [n for n in self.handlers if n != self.late or back]


class Unavailable:
    """A node the SuperLink lists but that is not there for its first ``misses`` identify
    queries: they come back as Flower's ``NODE_UNAVAILABLE`` error (code 5)."""

    def __init__(self, node, misses: int) -> None:
        self.node, self.misses, self.partition_id = node, misses, node.partition_id

    def __call__(self, message):
        if message.metadata.message_type == "query" and self.misses > 0:
            self.misses -= 1
            return Message(Error(code=5, reason="Error: Node Unavailable"), reply_to=message)
        return self.node(message)


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def make(directory=None, *, clock=True, min_nodes=NUM_NODES, eval_every=1):
    return ASGD(
        clock=VirtualClock(seed=2) if clock else None,
        min_nodes=min_nodes,
        seed=4,
        eval_every=eval_every,
        checkpoint_dir=directory,
        checkpoint_every=EVERY if directory else None,
        refresh_interval=0.0,
    )


def start(strategy, grid, evaluate_fn=None, *, timeout=TIMEOUT):
    return strategy.start(
        grid,
        initial_arrays(),
        num_rounds=NUM_ROUNDS,
        timeout=timeout,
        train_config=TRAIN,
        evaluate_fn=evaluate_fn,
    )


def crashed_run(tmp_path, *, clock=True):
    """Crash a run between checkpoints; the checkpoint and the stable id of a node that held a
    task in flight at it."""
    with pytest.raises(Crash):
        start(
            make(tmp_path, clock=clock),
            FakeGrid(quadratic_fleet(NUM_NODES, seed=21)),
            crash_at(CRASH_AT),
        )
    saved = Checkpointer(tmp_path, None).load()
    assert saved.in_flight, "an asynchronous run's checkpoint holds tasks in flight"
    return saved, saved.in_flight[0].stable_id


def late_grid(stable_id, after):
    """The same fleet under new node ids, the node of ``stable_id`` listed late."""
    nodes = {node_id + 10**9: node for node_id, node in quadratic_fleet(NUM_NODES, seed=21).items()}
    late = next(n for n, node in nodes.items() if node.partition_id == stable_id)
    return LateGrid(nodes, late=late, after=after)


def test_with_a_clock_the_resumed_run_waits_for_a_late_node_and_matches_the_full_run(tmp_path):
    full = start(make(), FakeGrid(quadratic_fleet(NUM_NODES, seed=21)))
    saved, stable = crashed_run(tmp_path)
    # Listed from the 3rd look on: the resumed run identified the other three at its first two,
    # then waits for it, looking at the nodes once a second (a later look only waits longer).
    grid = late_grid(stable, after=3)
    resumed = start(make(tmp_path, min_nodes=NUM_NODES - 1), grid)
    assert resumed.stopped_by == "budget", resumed.stop_detail
    assert history(resumed) == history(full)
    for a, b in zip(
        full.arrays.to_numpy_ndarrays(), resumed.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert "lost" not in resumed.faults


def test_without_a_clock_a_late_node_gets_its_saved_task_when_it_shows_up(tmp_path):
    saved, stable = crashed_run(tmp_path, clock=False)
    late = [(t.stable_id, t.iteration) for t in saved.in_flight if t.stable_id == stable]
    # Listed from the 5th look on: its identify query is answered while the run goes on, and
    # its saved task's reply comes before the budget is spent.
    resumed = start(
        make(tmp_path, clock=False, min_nodes=NUM_NODES - 1), late_grid(stable, after=5)
    )
    assert resumed.stopped_by == "budget", resumed.stop_detail
    after = [(r["stable-id"], r["iteration"]) for r in records(resumed)[saved.num_updates :]]
    assert after.count(late[0]) == 1, after
    assert "lost" not in resumed.faults


def test_a_node_that_never_comes_back_loses_its_task_after_the_timeout(tmp_path, caplog):
    saved, stable = crashed_run(tmp_path)
    # The run waits out the whole timeout for the node: a shorter one than TIMEOUT, still many
    # times what a task of this fleet takes (the other tasks must not be lost with it).
    resumed = start(
        make(tmp_path, min_nodes=NUM_NODES - 1), late_grid(stable, after=None), timeout=2.0
    )
    assert resumed.stopped_by == "budget", resumed.stop_detail
    assert resumed.faults.get("lost") == 1, resumed.faults
    lost = [r.getMessage() for r in caplog.records if "did not come back" in r.getMessage()]
    assert lost == [f"fault (lost): stable id {stable} did not come back within 2 s"], lost
    after = records(resumed)[saved.num_updates :]
    assert stable not in {r["stable-id"] for r in after}


def test_a_checkpoint_written_while_a_node_is_awaited_keeps_its_task_and_its_count(tmp_path):
    """Without a clock the run does not wait: here it spends its budget before the timeout, and
    its last checkpoint still holds the awaited node's task and task count for the next resume."""
    saved, stable = crashed_run(tmp_path, clock=False)
    resumed = start(
        make(tmp_path, clock=False, min_nodes=NUM_NODES - 1), late_grid(stable, after=None)
    )
    assert resumed.stopped_by == "budget" and "lost" not in resumed.faults, resumed.faults
    final = Checkpointer(tmp_path, None).load()

    def task(t):
        return t.stable_id, t.base_version, t.iteration, t.task_index, t.seed

    waiting = [task(t) for t in saved.in_flight if t.stable_id == stable]
    assert [task(t) for t in final.in_flight if t.stable_id == stable] == waiting
    assert final.nodes[stable] == saved.nodes[stable]


def test_a_node_listed_before_it_is_back_is_asked_again_and_the_run_matches_the_full_run(tmp_path):
    """After a SuperLink restart its database lists a node whose heartbeat has not come back:
    the resumed run's identify query to it comes back "node unavailable"; it is asked again, and
    gets its saved task under its stable id."""
    full = start(make(), FakeGrid(quadratic_fleet(NUM_NODES, seed=21)))
    saved, stable = crashed_run(tmp_path)
    grid = late_grid(stable, after=0)
    grid.handlers[grid.late] = Unavailable(grid.handlers[grid.late], misses=1)
    resumed = start(make(tmp_path), grid)
    assert resumed.stopped_by == "budget", resumed.stop_detail
    assert history(resumed) == history(full)
    queries = [n for n, kind in grid.log if kind == "query" and n == grid.late]
    assert len(queries) == 2 and "lost" not in resumed.faults


def test_a_node_that_misses_every_identify_query_is_keyed_by_its_node_id():
    nodes = quadratic_fleet(NUM_NODES, seed=21)
    absent = next(iter(nodes))
    nodes[absent] = Unavailable(nodes[absent], misses=10)
    grid = FakeGrid(nodes)
    result = start(make(clock=False, min_nodes=NUM_NODES), grid)
    assert result.stopped_by == "budget", result.stop_detail
    queries = [n for n, kind in grid.log if kind == "query" and n == absent]
    assert len(queries) == QUERY_ATTEMPTS
    assert absent in {r["stable-id"] for r in records(result)}


def test_a_run_whose_every_node_misses_its_first_identify_query_waits_for_them():
    """Listed before they are reachable (as after a SuperLink restart), every node's first query
    comes back "node unavailable": the start asks them again, and resolves ASGD's "auto" lr from
    all of them (it once divided by the none admitted)."""
    nodes = {k: Unavailable(v, misses=1) for k, v in quadratic_fleet(NUM_NODES, seed=21).items()}
    strategy = make(clock=False)
    result = start(strategy, FakeGrid(nodes))
    assert result.stopped_by == "budget", result.stop_detail
    assert strategy.aggregator.lr == 1 / NUM_NODES
    assert {r["stable-id"] for r in records(result)} == set(range(NUM_NODES))


def test_a_start_with_no_node_admitted_within_the_timeout_says_so():
    """Every node misses every identify query until the timeout (or max_wall_time) ends the
    wait: a TimeoutError, not a setting resolved from no node."""
    nodes = {k: Unavailable(v, misses=10) for k, v in quadratic_fleet(NUM_NODES, seed=21).items()}
    admitted = "no connected node was admitted"
    with pytest.raises(TimeoutError, match=rf"{admitted} .*within the timeout \(0.5 s\)$"):
        make(clock=False).start(
            FakeGrid(nodes),
            initial_arrays(),
            num_rounds=NUM_ROUNDS,
            timeout=0.5,
            train_config=TRAIN,
        )
    for node in nodes.values():
        node.misses = 10
    # max_wall_time ends the wait, not the 60-s timeout
    with pytest.raises(TimeoutError, match=rf"{admitted} .*within max_wall_time \(0.5 s\)$"):
        make(clock=False).start(
            FakeGrid(nodes),
            initial_arrays(),
            num_rounds=NUM_ROUNDS,
            timeout=60.0,
            train_config=TRAIN,
            max_wall_time=0.5,
        )


def test_the_resumed_run_keeps_the_checkpoints_auto_lr_and_refuses_a_bad_one(tmp_path):
    """ASGD's "auto" lr is 1 / (nodes at the start): resumed with one node short, the run keeps
    the checkpoint's lr; a checkpoint whose lr is not a finite positive float is refused."""
    saved, stable = crashed_run(tmp_path)
    assert saved.aggregator["hyperparameters"]["lr"] == 1 / NUM_NODES
    strategy = make(tmp_path, min_nodes=NUM_NODES - 1)
    # Started with three nodes (the fourth is listed from the 3rd look, in the wait for it).
    start(strategy, late_grid(stable, after=3))
    assert strategy.aggregator.lr == 1 / NUM_NODES
    for bad in (-1.0, float("nan"), "0.5", True):
        state = Checkpointer(tmp_path, None).load()
        state.aggregator["hyperparameters"]["lr"] = bad
        Checkpointer(tmp_path, None).save(state, state.aggregator["version"])
        with pytest.raises(CheckpointError, match=f"the checkpoint's lr={bad!r} is not a finite"):
            start(make(tmp_path), FakeGrid(quadratic_fleet(NUM_NODES, seed=21)))


def test_the_resumed_run_keeps_its_eval_every_and_patience_and_refuses_bad_ones(tmp_path):
    """By default ``eval_every`` is the number of nodes at the start and ``patience``
    max(10 x nodes, 100): resumed before one node is back, the run keeps the checkpoint's
    values, and a value given to the resumed run is its own. A checkpoint written before they
    were kept resolves them again; a bad value is refused."""
    with pytest.raises(Crash):
        start(
            make(tmp_path, eval_every=None),
            FakeGrid(quadratic_fleet(NUM_NODES, seed=21)),
            crash_at(2 * NUM_NODES),
        )
    saved = Checkpointer(tmp_path, None).load()
    assert saved.settings == {"eval_every": NUM_NODES, "patience": 100}
    stable = saved.in_flight[0].stable_id
    resumed = start(
        make(tmp_path, min_nodes=NUM_NODES - 1, eval_every=None),
        late_grid(stable, after=3),
        crash_at(-1),
    )
    assert _spacing(resumed, saved.last_eval_step) == {NUM_NODES}
    assert Checkpointer(tmp_path, None).load().settings == saved.settings
    Checkpointer(tmp_path, None).save(saved, 6)
    given = start(
        make(tmp_path, min_nodes=NUM_NODES - 1, eval_every=2),
        late_grid(stable, after=3),
        crash_at(-1),
    )
    assert _spacing(given, saved.last_eval_step + 1) == {2}
    for bad in (0, "4", True, 2.5):
        Checkpointer(tmp_path, None).save(_with_settings(saved, eval_every=bad), 6)
        with pytest.raises(CheckpointError, match=f"the checkpoint's eval_every={bad!r} is not"):
            start(make(tmp_path, eval_every=None), FakeGrid(quadratic_fleet(NUM_NODES, seed=21)))
    tree = to_tree(saved)
    del tree["state"]["settings"]  # as written before the settings were kept
    (tmp_path / FILENAME).write_bytes(statefile.dumps(tree))
    resumed = start(
        make(tmp_path, min_nodes=NUM_NODES - 1, eval_every=None),
        late_grid(stable, after=3),
        crash_at(-1),
    )
    assert _spacing(resumed, saved.last_eval_step) == {NUM_NODES - 1}


def _spacing(result, since):
    """The server steps between central evaluations from step ``since`` on (the final one,
    made when the budget runs out, left out)."""
    steps = sorted(s for s in result.evaluate_metrics_serverapp if s >= since)[:-1]
    assert len(steps) >= 3, steps
    return {b - a for a, b in pairwise(steps)}


def _with_settings(state, **settings):
    """A copy of checkpoint ``state`` with some of its ``settings`` replaced."""
    return replace(state, settings={**state.settings, **settings})
