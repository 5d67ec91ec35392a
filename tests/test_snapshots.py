"""Snapshots and the resender on their own: a run saved and restored into a new run, the
settings kept or refused, checkpoints when due, saved tasks sent again as their nodes return."""

import time

import numpy as np
import pytest
from loop_parts import DIM, NodeList, _identity, answer, collaborators, make_run  # noqa: F401

from fl_async.strategies.checkpoint import CheckpointError, SavedTask


def saved_run(tmp_path, every=None):
    """A run with a checkpoint directory: one update applied, one task still in flight."""
    run, policy = make_run(nodes=2)
    run.eval_every, run.patience = 3, 40
    parts = collaborators(run, policy, checkpoint_dir=tmp_path, checkpoint_every=every)
    grid = NodeList([1, 2])
    parts.dispatcher.dispatch(grid)
    first = run.book.ids()[0]
    parts.replies.handle(first, answer(grid.pushed[0]), arrival=time.time())
    return run, parts, grid.pushed[1]


def test_a_saved_run_is_restored_into_a_new_one(tmp_path):
    run, parts, _ = saved_run(tmp_path)
    parts.snapshots.claim()
    parts.snapshots.save()
    state = parts.snapshots.load()
    assert [t.stable_id for t in state.in_flight] == [2]
    fresh, policy = make_run(nodes=2)
    again = collaborators(fresh, policy, checkpoint_dir=tmp_path)
    again.snapshots.restore(state, [], eval_every=None, patience=None)
    assert fresh.version == 1 and fresh.rule.params[0].tolist() == run.rule.params[0].tolist()
    assert (fresh.eval_every, fresh.patience) == (3, 40)  # as the saved run resolved them
    assert fresh.recorder.num_updates == 1 and len(fresh.recorder.result.train_metrics_clientapp)
    assert fresh.registry[1].tasks == 1 and fresh.registry[2].tasks == 1


def test_settings_given_to_the_new_run_win_and_bad_saved_ones_are_refused(tmp_path):
    run, parts, _ = saved_run(tmp_path)
    state = parts.snapshots.snapshot()
    fresh, policy = make_run(nodes=2)
    again = collaborators(fresh, policy)
    fresh.eval_every = 7
    again.snapshots.restore(state, [], eval_every=7, patience=None)
    assert (fresh.eval_every, fresh.patience) == (7, 40)
    state.settings = {"eval_every": 0, "patience": 40}
    with pytest.raises(CheckpointError, match="eval_every=0 is not a positive int"):
        collaborators(*make_run(nodes=2)).snapshots.restore(state, [], eval_every=None)


def test_a_saved_auto_hyperparameter_is_kept_or_refused(tmp_path):
    run, parts, _ = saved_run(tmp_path)
    state = parts.snapshots.snapshot()
    fresh, policy = make_run(nodes=2)
    auto = [(fresh.rule, "lr", lambda n: 1.0 / n)]
    collaborators(fresh, policy).snapshots.restore(state, auto)
    assert fresh.rule.lr == 0.5  # the saved run's lr, not 1/2 from the nodes back
    state.aggregator["hyperparameters"]["lr"] = -1.0
    with pytest.raises(CheckpointError, match="lr=-1.0 is not a finite positive float"):
        collaborators(*make_run(nodes=2)).snapshots.restore(state, auto)


def test_a_checkpoint_is_written_when_due(tmp_path):
    run, parts, second = saved_run(tmp_path, every=2)
    parts.snapshots.claim()
    parts.snapshots.save_if_due()
    assert parts.snapshots.load() is None  # one step: not due
    parts.replies.handle(run.book.ids()[0], answer(second), arrival=time.time())
    parts.snapshots.save_if_due()
    assert parts.snapshots.load().aggregator["version"] == 2


def saved_task(stable_id):
    """A task saved in flight by node ``stable_id``, from the zero model."""
    return SavedTask(stable_id, 0, 0, 0, 11, 0.0, 1.0, [np.zeros(DIM, np.float32)], False)


def test_the_resender_sends_a_saved_task_once_its_node_is_back_and_loses_it_after():
    run, policy = make_run(nodes=1)
    parts = collaborators(run, policy)
    resender = parts.snapshots.resender
    grid = NodeList([1])
    resender.resend(grid, [saved_task(1), saved_task(5)], refresh=lambda *a, **k: None)
    assert [t.stable_id for t in run.book.tasks()] == [1] and len(grid.pushed) == 1
    assert [s.stable_id for s in resender.held] == [5]  # node 5 is not back yet
    resender.held_until = 0.0  # its timeout passed
    resender.resend_held(grid)
    assert resender.held == [] and run.recorder.faults == {"lost": 1}
