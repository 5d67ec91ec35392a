"""A crash between two checkpoints, resumed on a grid whose nodes came back with new node ids.

What a SuperLink restart does to the strategy (docs/strategies.md, "Surviving a SuperLink
restart"): the ServerApp process dies after applying updates past its last checkpoint; a new run
on a new grid (new message ids, nodes possibly with new node ids) resumes from that checkpoint.
With a virtual clock the resumed run must end exactly as an uninterrupted one: the updates
applied after the checkpoint are redone once, the checkpoint's tasks in flight are sent again and
applied once.
"""

from collections import Counter

import numpy as np
import pytest
from fakegrid import Crash, FakeGrid, crash_at, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, MetricRecord
from strategy_loop import history, records

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, GSGM, MIFA
from fl_async.strategies.checkpoint import Checkpointer, CheckpointError, RunSuperseded

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
NUM_NODES, NUM_ROUNDS, EVERY, CRASH_AT = 4, 5, 3, 7


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def start(strategy, nodes, evaluate_fn=None):
    return strategy.start(
        FakeGrid(nodes),
        initial_arrays(),
        num_rounds=NUM_ROUNDS,
        timeout=5,
        train_config=TRAIN,
        evaluate_fn=evaluate_fn,
    )


def make(preset, directory=None):
    """The seeded run every test here crashes and resumes, checkpointing into ``directory``."""
    return preset(
        clock=VirtualClock(seed=2),
        min_nodes=NUM_NODES,
        seed=4,
        eval_every=1,
        checkpoint_dir=directory,
        checkpoint_every=EVERY if directory else None,
    )


def with_new_node_ids(nodes, offset=10**9):
    """The same nodes (partition ids, data) under other node ids, as after re-registering."""
    return {node_id + offset: node for node_id, node in nodes.items()}


@pytest.mark.parametrize("preset", [ASGD, GSGM, MIFA])
def test_a_crash_between_checkpoints_resumes_to_the_uninterrupted_run(tmp_path, preset):
    full = start(make(preset), quadratic_fleet(NUM_NODES, seed=21))
    with pytest.raises(Crash):
        start(make(preset, tmp_path), quadratic_fleet(NUM_NODES, seed=21), crash_at(CRASH_AT))
    saved = Checkpointer(tmp_path, None).load()
    # The updates of steps 7.. were applied, then lost with the process: the checkpoint is
    # step 6's, with the tasks then in flight.
    assert saved.aggregator["version"] == saved.num_updates == CRASH_AT - 1
    in_flight = [(t.stable_id, t.iteration) for t in saved.in_flight]
    assert in_flight

    nodes = with_new_node_ids(quadratic_fleet(NUM_NODES, seed=21))
    resumed = start(make(preset, tmp_path), nodes)
    assert resumed.num_updates == full.num_updates == NUM_NODES * NUM_ROUNDS
    for a, b in zip(
        full.arrays.to_numpy_ndarrays(), resumed.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert history(resumed) == history(full)
    rows = records(resumed)
    tasks = Counter((r["stable-id"], r["iteration"]) for r in rows)
    assert max(tasks.values()) == 1
    after = [(r["stable-id"], r["iteration"]) for r in rows[saved.num_updates :]]
    assert all(after.count(task) == 1 for task in in_flight)
    assert {r["node-id"] for r in rows[saved.num_updates :]} <= set(nodes)


@pytest.mark.parametrize("preset", [ASGD, GSGM])
def test_a_node_new_since_the_checkpoint_joins_the_resumed_run(tmp_path, preset):
    """A node the checkpoint does not know (it joined later, or is new) gets work after resuming:
    it joins the loaded dispatch policy at the active minimum, as any newcomer does."""

    with pytest.raises(Crash):
        start(make(preset, tmp_path), quadratic_fleet(NUM_NODES, seed=21), crash_at(CRASH_AT))
    saved = Checkpointer(tmp_path, None).load()
    assert sorted(saved.policy["clock"]) == list(range(NUM_NODES))
    nodes = with_new_node_ids(quadratic_fleet(NUM_NODES, seed=21))
    (newcomer_id, newcomer), *_ = quadratic_fleet(NUM_NODES + 1, seed=5).items()
    newcomer.partition_id = NUM_NODES  # a partition the checkpoint has never seen
    nodes[newcomer_id] = newcomer
    resumed = start(make(preset, tmp_path), nodes)
    rows = records(resumed)
    assert resumed.stopped_by == "budget", resumed.stop_detail
    assert NUM_NODES in {r["stable-id"] for r in rows[saved.num_updates :]}


@pytest.mark.parametrize("preset", [ASGD, GSGM])
def test_a_run_still_alive_when_another_takes_over_its_directory_stops_without_writing(
    tmp_path, preset
):
    """A crashed ServerApp that is not dead after all (Flower did not see its parent exit) goes
    on when the SuperLink is back, beside the run resumed from its checkpoint: the newer run's
    claim stops it before it applies another update, and it never writes the checkpoint again."""
    claimed = {}

    def take_over_at(step):
        def evaluate(server_step, arrays):
            if server_step == step:
                claimed["checkpoint"] = Checkpointer(tmp_path, None).path.read_bytes()
                Checkpointer(tmp_path, None).claim()  # what a resumed run does first
            claimed["last-step"] = server_step
            return MetricRecord({"step": server_step})

        return evaluate

    stale = make(preset, tmp_path)
    with pytest.raises(RunSuperseded, match=f"took over the checkpoint directory {tmp_path}"):
        start(stale, quadratic_fleet(NUM_NODES, seed=21), take_over_at(CRASH_AT))
    # Step 7 was the last: the update that came next was not applied, and the checkpoint due at
    # step 9 (and the one at the end) were not written.
    assert claimed["last-step"] == CRASH_AT
    assert stale.aggregator.version == CRASH_AT
    assert Checkpointer(tmp_path, None).path.read_bytes() == claimed["checkpoint"]


def test_the_lease_names_its_owner_and_a_run_that_claims_again_keeps_its_directory(tmp_path):
    first, second = Checkpointer(tmp_path, 1), Checkpointer(tmp_path, 1)
    first.check_owner()  # not claimed yet: nothing to check
    first.claim()
    first.check_owner()
    first.claim()  # claiming again (a new start of the same strategy) keeps the directory
    first.check_owner()
    second.claim()
    second.check_owner()
    with pytest.raises(RunSuperseded, match="process [0-9]+ on .*took over"):
        first.check_owner()
    with pytest.raises(RunSuperseded):
        first.save(None, 1)  # nothing written
    assert not first.path.exists()
    second.lease_path.unlink()  # removed by hand: no other run's claim
    second.check_owner()


def test_the_resumed_runs_wall_times_go_on_from_the_checkpoints(tmp_path):
    """Its records' and its result's wall times count the runs before it up to the checkpoint
    (here said to be 1000 s), so that a resumed history tells the time the run took; its
    ``max_wall_time`` counts its own time only. A checkpoint without one starts from 0; a bad
    one is refused."""

    with pytest.raises(Crash):
        start(make(ASGD, tmp_path), quadratic_fleet(NUM_NODES, seed=21), crash_at(CRASH_AT))
    saved = Checkpointer(tmp_path, None).load()
    assert 0 <= saved.wall < 1000
    saved.wall = 1000.0
    Checkpointer(tmp_path, None).save(saved, saved.aggregator["version"])
    resumed = make(ASGD, tmp_path).start(
        FakeGrid(quadratic_fleet(NUM_NODES, seed=21)),
        initial_arrays(),
        num_rounds=NUM_ROUNDS,
        timeout=5,
        train_config=TRAIN,
        max_wall_time=60.0,
    )
    assert resumed.stopped_by == "budget" and 1000 <= resumed.wall_time < 1060
    walls = [r["wall-time"] for r in records(resumed)]
    assert all(w < 1000 for w in walls[: saved.num_updates])
    assert all(1000 <= w <= resumed.wall_time for w in walls[saved.num_updates :])
    evaluated = resumed.evaluate_metrics_serverapp
    assert all(evaluated[k]["wall-time"] >= 1000 for k in evaluated if k > saved.num_updates)
    for bad in (-1.0, float("nan"), "5", True):
        saved.wall = bad
        Checkpointer(tmp_path, None).save(saved, saved.aggregator["version"])
        with pytest.raises(CheckpointError, match=f"the checkpoint's wall={bad!r} is not"):
            start(make(ASGD, tmp_path), quadratic_fleet(NUM_NODES, seed=21))
    saved.wall = None  # as written before the wall time was kept
    Checkpointer(tmp_path, None).save(saved, saved.aggregator["version"])
    assert start(make(ASGD, tmp_path), quadratic_fleet(NUM_NODES, seed=21)).wall_time < 1000
