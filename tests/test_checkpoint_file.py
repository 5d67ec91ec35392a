"""Checkpoint files of every preset: what is saved comes back bit for bit, a resume from it ends
as the uninterrupted run, and a file that is not an intact checkpoint is refused, never run."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from exact import assert_identical
from fakegrid import Crash, FakeGrid, crash_at, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async import statefile
from fl_async.scheduling import VirtualClock
from fl_async.strategies import PRESETS, CheckpointError
from fl_async.strategies.checkpoint import FILENAME, PICKLED, Checkpointer, to_tree
from fl_async.strategies.journal import JOURNAL

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
NUM_NODES, NUM_ROUNDS, EVERY, CRASH_AT = 4, 4, 2, 3  # barrier rules take 4 steps in all


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def make(preset: str, directory=None):
    return PRESETS[preset](
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


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_presets_run_state_comes_back_bit_for_bit(tmp_path, preset, monkeypatch):
    written = []
    save = Checkpointer.save
    monkeypatch.setattr(
        Checkpointer,
        "save",
        lambda self, state, version: (written.append(to_tree(state)), save(self, state, version))[
            1
        ],
    )
    start(make(preset, tmp_path))
    saved = Checkpointer(tmp_path, None).load()
    assert len(written) > 1
    assert_identical(written[-1], to_tree(saved))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "fl-async-lease.json") == [
        FILENAME,
        JOURNAL,
    ]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_resumes_from_a_checkpoint_to_the_uninterrupted_run(tmp_path, preset):
    full = start(make(preset))
    with pytest.raises(Crash):
        start(make(preset, tmp_path), crash_at(CRASH_AT))
    saved = Checkpointer(tmp_path, None).load()
    resumed = start(make(preset, tmp_path), offset=10**9)  # the nodes came back, new ids
    assert resumed.num_updates == full.num_updates and saved.num_replies > 0
    records = [dict(r) for _, r in sorted(resumed.train_metrics_clientapp.items())]
    # Resumed, not restarted: the records before the checkpoint keep the first run's node ids.
    assert all(r["node-id"] < 10**9 for r in records[: saved.num_replies])
    assert all(r["node-id"] >= 10**9 for r in records[saved.num_replies :])
    for a, b in zip(
        full.arrays.to_numpy_ndarrays(), resumed.arrays.to_numpy_ndarrays(), strict=True
    ):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


class _Marker:
    """Unpickling this creates ``path``: proof that a pickle ran code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _damaged(kind: str, good: bytes, marker) -> bytes:
    return {
        "pickle": pickle.dumps(_Marker(marker)),
        "random": np.random.default_rng(0).bytes(4096),
        "truncated": good[: len(good) // 2],
        "checksum": good[:-1] + bytes([good[-1] ^ 0xFF]),
        "foreign-json": b'{"name": "another program", "version": 3}\n',
        "foreign-state": statefile.dumps({"format": "another-program", "schema": 3}),
    }[kind]


@pytest.mark.parametrize(
    "kind, says",
    [
        ("pickle", "not an fl-async state file"),
        ("random", "not an fl-async state file"),
        ("truncated", "truncated"),
        ("checksum", "SHA-256 does not match"),
        ("foreign-json", "not an fl-async state file"),
        ("foreign-state", "not an fl-async checkpoint"),
    ],
)
def test_a_damaged_or_foreign_checkpoint_stops_the_run_with_one_line(tmp_path, kind, says):
    directory, marker = tmp_path / "checkpoint", tmp_path / "ran"
    start(make("asgd", directory))
    path = directory / FILENAME
    path.write_bytes(_damaged(kind, path.read_bytes(), marker))
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=says) as caught:
        start(make("asgd", directory))
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "delete it" in message
    assert not marker.exists() and path.read_bytes() == before  # nothing ran, nothing changed


def test_a_pickled_checkpoint_of_an_older_fl_async_is_refused_unread(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / PICKLED).write_bytes(pickle.dumps(_Marker(marker)))
    with pytest.raises(CheckpointError, match="older fl-async, stored with pickle") as caught:
        start(make("gsgm", tmp_path))
    assert "\n" not in str(caught.value) and str(tmp_path / PICKLED) in str(caught.value)
    assert "cannot be resumed safely" in str(caught.value)
    assert not marker.exists() and not (tmp_path / FILENAME).exists()
