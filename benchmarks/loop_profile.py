"""The event loop's own time per update, in one process on the in-memory grid (no Flower, no Ray).

Run by hand (not a test)::

    nice -n 15 python benchmarks/loop_profile.py --strategies gsgm asgd fedbuff \
        --nodes 100 1000 10000 [--updates 3000] [--repeats 3] [--profile]

runs each preset with the virtual clock on the test suite's in-memory grid
(``tests/fakegrid.py``: quadratic nodes, every reply there at the first pull) without
evaluation, so what is timed is the strategy's own work per update: dispatch, pulls, the rule,
bookkeeping. Over the steady part, from the update at 20 % of the budget (start-up: identifying
the nodes and the first dispatch to all of them, is left out), it measures the process's CPU time
per update (``time.process_time`` after each reply is handled: on a busy machine the least
disturbed figure) and, with ``scale.update_times`` over the ``wall-time`` of each update record,
the mean and the median wall gap between updates. Prints, per strategy and node count, the
median of each over ``--repeats`` runs, in µs, and writes them as a compact result to ``--out``
(``measured.py``; ``blocks.py`` renders it); ``--profile`` also prints cProfile's top
functions of one more run.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

from measured import header, write
from scale import update_times

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the in-memory grid the strategy tests use

from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity  # noqa: E402
from flwr.app import ConfigRecord  # noqa: E402

from fl_async.scheduling import VirtualClock  # noqa: E402
from fl_async.strategies import PRESETS  # noqa: E402
from fl_async.strategies.replies import Replies  # noqa: E402

STEADY_FROM = 0.2


def run(strategy: str, nodes: int, updates: int, seed: int) -> dict[str, float | None]:
    """One run of ``strategy`` over ``nodes`` quadratic nodes; its times per update (s)."""
    fleet = quadratic_fleet(nodes, seed=seed)
    preset = PRESETS[strategy](
        clock=VirtualClock(seed=seed), min_nodes=nodes, seed=seed, poll_interval=0.001
    )
    handle, cpu = Replies.handle, []

    def timed_handle(*args, **kwargs):
        handled = handle(*args, **kwargs)
        cpu.append(time.process_time())
        return handled

    Replies.handle = timed_handle  # one CPU time stamp per reply handled
    try:
        with task_identity():
            result = preset.start(
                FakeGrid(fleet, delay_seed=seed, max_delay=0),
                initial_arrays(),
                num_rounds=max(1, -(-updates // nodes)),
                timeout=600,
                max_updates=updates,
                train_config=ConfigRecord({"local-steps": 1, "lr": 0.1}),
            )
    finally:
        Replies.handle = handle
    records = [dict(r) for _, r in sorted(result.train_metrics_clientapp.items())]
    history = {"updates": [{"wall-time": r["wall-time"], "accepted": True} for r in records]}
    steady = cpu[int(STEADY_FROM * len(cpu)) :]
    cpu_per_update = (steady[-1] - steady[0]) / (len(steady) - 1)
    return {**update_times(history, steady_from=STEADY_FROM), "cpu": cpu_per_update}


def measure(strategy: str, nodes: int, args: argparse.Namespace) -> dict[str, float | int | str]:
    """The medians over ``args.repeats`` runs of one strategy and node count, in µs (printed)."""
    runs = [run(strategy, nodes, args.updates, args.seed) for _ in range(args.repeats)]
    cpu, mean, median = (
        statistics.median(r[key] for r in runs) * 1e6 for key in ("cpu", "mean-gap", "median-gap")
    )
    each = " ".join(f"{r['cpu'] * 1e6:.0f}" for r in runs)
    print(
        f"{strategy:8s} nodes={nodes:6d} updates={args.updates} per update: CPU "
        f"{cpu:.0f} us, mean gap {mean:.0f} us, median gap {median:.0f} us (medians "
        f"of {args.repeats}; CPU of each: {each})",
        flush=True,
    )
    return {
        "strategy": strategy,
        "nodes": nodes,
        "cpu-us": round(cpu, 1),
        "mean-gap-us": round(mean, 1),
        "median-gap-us": round(median, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["gsgm", "asgd", "fedbuff"])
    parser.add_argument("--nodes", nargs="+", type=int, default=[100, 1000, 10000])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="cProfile one more run of each")
    parser.add_argument("--out", default="benchmarks/results/loop_profile.json")
    args = parser.parse_args()
    started, rows = header("loop_profile"), []
    for strategy in args.strategies:
        for nodes in args.nodes:
            rows.append(measure(strategy, nodes, args))
            if args.profile:
                profiler = cProfile.Profile()
                profiler.runcall(run, strategy, nodes, args.updates, args.seed)
                pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    write(
        {
            **started,
            "updates": args.updates,
            "repeats": args.repeats,
            "seed": args.seed,
            "steady-from": STEADY_FROM,
            "runs": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
