"""The history journal beside a checkpoint: each save writes only the history added since the last
one, a resume reads back exactly the part its checkpoint counts, and a journal that does not hold
that part stops the run with one line, changing nothing."""

from __future__ import annotations

import numpy as np
import pytest
from exact import assert_identical
from fakegrid import Crash, FakeGrid, crash_at, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async import statefile
from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, CheckpointError
from fl_async.strategies.checkpoint import FILENAME, Checkpointer, to_tree
from fl_async.strategies.journal import JOURNAL, TABLES

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
NUM_NODES, NUM_ROUNDS, EVERY, CRASH_AT = 4, 5, 2, 9


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def make(directory=None):
    return ASGD(
        clock=VirtualClock(seed=2),
        min_nodes=NUM_NODES,
        seed=4,
        eval_every=1,
        checkpoint_dir=directory,
        checkpoint_every=EVERY if directory else None,
    )


def start(strategy, evaluate_fn=None, offset=0):
    nodes = {k + offset: node for k, node in quadratic_fleet(NUM_NODES, seed=21).items()}
    return strategy.start(
        FakeGrid(nodes),
        initial_arrays(),
        num_rounds=NUM_ROUNDS,
        timeout=5,
        train_config=TRAIN,
        evaluate_fn=evaluate_fn,
    )


def crashed(directory):
    """The checkpoint directory of a run that crashed at server step ``CRASH_AT``."""
    with pytest.raises(Crash):
        start(make(directory), crash_at(CRASH_AT))
    return directory


def assert_same_run(a, b):
    assert a.num_updates == b.num_updates
    for x, y in zip(a.arrays.to_numpy_ndarrays(), b.arrays.to_numpy_ndarrays(), strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    for name in ("train_metrics_clientapp", "evaluate_metrics_serverapp"):
        ours, theirs = getattr(a, name), getattr(b, name)
        drop = ("wall-time", "node-id")  # the clock on the wall and the new grid's node ids
        assert [{k: v for k, v in dict(r).items() if k not in drop} for r in ours.values()] == [
            {k: v for k, v in dict(r).items() if k not in drop} for r in theirs.values()
        ]


def test_each_save_appends_only_the_history_added_since_the_last(tmp_path):
    saves = []
    real = Checkpointer.save

    def save(self, state, version):
        saves.append({name: len(getattr(state, name)) for name in TABLES})
        return real(self, state, version)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Checkpointer, "save", save)
        start(make(tmp_path))
    parts = statefile.loads_all((tmp_path / JOURNAL).read_bytes())
    assert len(parts) == len(saves) > 2
    before = dict.fromkeys(TABLES, 0)
    for part, counts in zip(parts, saves, strict=True):
        assert {n: len(part[n]) for n in TABLES} == {n: counts[n] - before[n] for n in TABLES}
        before = counts
    # The checkpoint file itself holds no history: it does not grow with the run.
    tree = statefile.loads((tmp_path / FILENAME).read_bytes())
    assert not set(TABLES) & set(tree["state"]) and tree["schema"] == 4


def test_a_crash_between_the_append_and_the_checkpoint_resumes_from_the_counted_part(tmp_path):
    full = start(make(), crash_at(-1))
    directory = crashed(tmp_path)
    counted = Checkpointer(directory, None).load()
    journal = directory / JOURNAL
    size = journal.stat().st_size
    # The crashed process appended its next part, then died before the checkpoint counted it.
    extra = statefile.dumps({name: {10**6: {"x": 1}} for name in TABLES})
    journal.write_bytes(journal.read_bytes() + extra)
    assert_identical(to_tree(Checkpointer(directory, None).load()), to_tree(counted))
    resumed = start(make(directory), crash_at(-1), offset=10**9)
    assert_same_run(resumed, full)
    parts = statefile.loads_all(journal.read_bytes())  # cut off, not kept, by the next save
    assert all(10**6 not in part["train_metrics"] for part in parts)
    assert journal.read_bytes()[:size] == (tmp_path / JOURNAL).read_bytes()[:size]


def test_a_checkpoint_of_schema_3_with_its_history_inside_is_resumed(tmp_path):
    full = start(make(), crash_at(-1))
    directory = crashed(tmp_path / "new")
    state = Checkpointer(directory, None).load()
    old = tmp_path / "old"
    old.mkdir()
    (old / FILENAME).write_bytes(statefile.dumps(to_tree(state)))  # as fl-async wrote it before
    assert_identical(to_tree(Checkpointer(old, None).load()), to_tree(state))
    resumed = start(make(old), crash_at(-1), offset=10**9)
    assert_same_run(resumed, full)
    assert statefile.loads((old / FILENAME).read_bytes())["schema"] == 4
    first = statefile.loads_all((old / JOURNAL).read_bytes())[0]
    assert len(first["train_metrics"]) >= len(state.train_metrics) > 0  # the whole history


def test_a_fresh_run_starts_the_journal_afresh(tmp_path):
    full = start(make(), crash_at(-1))
    stale = statefile.dumps({name: {1: {"stale": 1}} for name in TABLES})
    (tmp_path / JOURNAL).write_bytes(stale)  # left behind when the checkpoint was deleted
    run = start(make(tmp_path), crash_at(-1))
    assert_same_run(run, full)
    parts = statefile.loads_all((tmp_path / JOURNAL).read_bytes())
    assert all("stale" not in part["train_metrics"].get(1, {}) for part in parts)
    saved = Checkpointer(tmp_path, None).load()
    assert len(saved.train_metrics) == len(run.train_metrics_clientapp)


def _damage(kind: str, journal: bytes, checkpoint: bytes) -> tuple[bytes | None, bytes]:
    """The journal (None: removed) and checkpoint file after damage of ``kind``."""
    tree = statefile.loads(checkpoint)
    if kind == "miscounted":  # the checkpoint counts one record more than the journal holds
        tree["history"]["entries"]["train_metrics"] += 1
        return journal, statefile.dumps(tree)
    if kind == "not a part":  # an intact state file, counted, but not a part of a history
        first = len(statefile.dumps(statefile.loads_all(journal)[0]))
        forged = statefile.dumps([1, 2]) + journal[first:]
        tree["history"]["bytes"] += len(forged) - len(journal)
        return forged, statefile.dumps(tree)
    return {
        "missing": None,
        "shorter": journal[:-10],
        "corrupted": journal[:-1] + bytes([journal[-1] ^ 0xFF]),
    }[kind], checkpoint


@pytest.mark.parametrize(
    "kind, says",
    [
        ("missing", "journal .* is missing"),
        ("shorter", "fewer than the .* the checkpoint counts"),
        ("corrupted", "SHA-256 does not match"),
        ("miscounted", "entries, the checkpoint counts"),
        ("not a part", "part 1 is not a history part"),
    ],
)
def test_a_journal_without_the_counted_history_stops_the_run_with_one_line(tmp_path, kind, says):
    directory = crashed(tmp_path)
    journal, checkpoint = directory / JOURNAL, directory / FILENAME
    damaged, counted = _damage(kind, journal.read_bytes(), checkpoint.read_bytes())
    checkpoint.write_bytes(counted)
    if damaged is None:
        journal.unlink()
    else:
        journal.write_bytes(damaged)
    with pytest.raises(CheckpointError, match=says) as caught:
        start(make(directory))
    message = str(caught.value)
    assert "\n" not in message and str(checkpoint) in message and "delete it" in message
    assert checkpoint.read_bytes() == counted  # nothing written
    assert (journal.read_bytes() if journal.exists() else None) == damaged


def test_appended_state_files_read_back_in_order_and_name_the_damaged_one():
    trees = [{"step": k, "w": np.arange(k, dtype=np.float32)} for k in range(1, 4)]
    data = b"".join(statefile.dumps(t) for t in trees)
    assert_identical(statefile.loads_all(data), trees)
    assert statefile.loads_all(b"") == []
    second = len(statefile.dumps(trees[0]))
    broken = data[: second + 40] + b"x" + data[second + 41 :]
    with pytest.raises(statefile.StateFileError, match="^part 2: "):
        statefile.loads_all(broken)
    with pytest.raises(statefile.StateFileError, match="part 4: not an fl-async state file"):
        statefile.loads_all(data + b"junk")
