"""A checkpoint's cost as the run's history grows: the history journal against one whole file.

Run by hand (not a test): ``python benchmarks/checkpoint_cost.py``. For each history length
(``--records``: update records, with a central evaluation every ``--eval-every`` of them), a run
state with a model of ``--params`` float32 values is saved ``--pairs`` times by each arm, the
arms interleaved (whole, journal, whole, journal, ..., the order swapped every other pair):

- *whole*: the history inside the checkpoint file, written whole every time (what fl-async did
  before checkpoint schema 4: ``to_tree`` is that file's tree);
- *journal*: ``Checkpointer.save``, whose journal holds the history up to the last checkpoint,
  ``--every`` records before (written untimed before each timed save), so that each save appends
  those records.

Each timed save includes building its snapshot's plain values, encoding and writing the file
(synced to disk). The figures: each arm's median seconds a save, their ratio, and the files'
sizes. Both arms' files load back to the same state (checked).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from measured import header, write

from fl_async import protocol, statefile
from fl_async.files import write_atomically
from fl_async.strategies.checkpoint import FILENAME, Checkpointer, RunState, to_tree
from fl_async.strategies.journal import JOURNAL


def history(records: int, eval_every: int) -> tuple[dict, dict]:
    """Update records and central evaluations shaped like a real run's (``history.json``)."""
    rng = np.random.default_rng(0)
    train = {
        i: protocol.metric_record(
            {
                "train-loss": float(rng.random()),
                "train-accuracy": float(rng.random()),
                "num-examples": 50,
                "examples-processed": 500,
                "steps": 20,
                "partition-id": i % 30,
                "server-step": i - 1,
                "node-id": 5833775824042702624 + i % 30,
                "stable-id": i % 30,
                "staleness": int(rng.integers(0, 30)),
                "iteration": i // 30,
                "virtual-time": 6.1 * i,
                "wall-time": 0.1 * i,
                "accepted": 1,
            }
        )
        for i in range(1, records + 1)
    }
    evaluations = {
        step: protocol.metric_record(
            {
                "accuracy": float(rng.random()),
                "loss": float(rng.random()),
                "virtual-time": 6.1 * step,
                "wall-time": 0.1 * step,
                "num-updates": step,
            }
        )
        for step in range(0, records + 1, eval_every)
    }
    return train, evaluations


def state_of(params: int, train: dict, evaluations: dict) -> RunState:
    """A run state: an aggregator holding the model, and the history tables."""
    model = [np.random.default_rng(1).standard_normal(params).astype(np.float32)]
    return RunState(
        keys=["w"],
        aggregator={"version": len(train), "model": model},
        policy={},
        clock=None,
        order={"now": 1.0},
        task_bases={},
        num_updates=len(train),
        num_replies=len(train),
        faults={},
        last_eval_step=max(evaluations),
        train_config={},
        nodes={},
        forget_at={},
        in_flight=[],
        train_metrics=train,
        evaluate_metrics=evaluations,
        grid_metrics={},
    )


def head(table: dict, count: int) -> dict:
    return dict(list(table.items())[:count])


def save_whole(folder: Path, state: RunState) -> float:
    start = time.perf_counter()
    write_atomically(folder / FILENAME, statefile.dumps(to_tree(state)))
    return time.perf_counter() - start


def save_journal(folder: Path, state: RunState, every: int) -> float:
    """One timed save appending ``every`` records, after an untimed one of the history before."""
    for name in (FILENAME, JOURNAL):
        (folder / name).unlink(missing_ok=True)
    checkpointer = Checkpointer(folder, every)
    before = len(state.train_metrics) - every
    earlier = {step: r for step, r in state.evaluate_metrics.items() if step <= before}
    checkpointer.save(state_of(1, head(state.train_metrics, before), earlier), before)
    start = time.perf_counter()
    checkpointer.save(state, len(state.train_metrics))
    return time.perf_counter() - start


def measure(records: int, args: argparse.Namespace) -> dict:
    """Both arms at one history length."""
    train, evaluations = history(records, args.eval_every)
    state = state_of(args.params, train, evaluations)
    times: dict[str, list[float]] = {"whole": [], "journal": []}
    with tempfile.TemporaryDirectory() as whole, tempfile.TemporaryDirectory() as journal:
        arms = {
            "whole": lambda: save_whole(Path(whole), state),
            "journal": lambda: save_journal(Path(journal), state, args.every),
        }
        for pair in range(args.pairs):
            for arm in ("whole", "journal") if pair % 2 == 0 else ("journal", "whole"):
                times[arm].append(arms[arm]())
        loaded = [Checkpointer(Path(folder), None).load() for folder in (whole, journal)]
        same = statefile.dumps(to_tree(loaded[0])) == statefile.dumps(to_tree(loaded[1]))
        sizes = {
            "whole": (Path(whole) / FILENAME).stat().st_size,
            "journal": (Path(journal) / FILENAME).stat().st_size,
            "journal_file": (Path(journal) / JOURNAL).stat().st_size,
        }
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    return {
        "records": records,
        "evaluations": len(evaluations),
        "seconds_median": medians,
        "ratio": medians["whole"] / medians["journal"],
        "bytes": sizes,
        "same_state": same,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", default="10000,50000,150000")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--out", default="checkpoint_cost.json")
    args = parser.parse_args(argv)
    result = header("checkpoint_cost")
    result.update(
        params=args.params, every=args.every, eval_every=args.eval_every, pairs=args.pairs
    )
    result["results"] = [measure(int(n), args) for n in args.records.split(",")]
    print(write(result, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
