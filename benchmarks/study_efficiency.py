"""A study's efficiency: the floor of all its runs' client work over the study's wall time.

Usage::

    python benchmarks/study_efficiency.py [--engines study,separate] [--jobs 2] [--actors 2]
        [--repeat 1] [--label TEXT] [--out FILE] [--work DIR] -- BENCH_ARGS

BENCH_ARGS are ``fl-async bench``'s (scenario, splits, seeds, strategies, rounds, run config or
``--sweep GRIDFILE``; not ``--engine``, ``--jobs``, ``--actors`` or ``--out``). Each pass runs
the whole suite from nothing with one engine, the passes alternating between the engines (a drift
in the machine's load falls on both alike), and its wall time is the whole command's: start-up,
every run, the report. Then every run's client work (its applied updates' local training and its
central evaluations, ``floor_replay``) is replayed in ``--actors`` plain processes, one run after
another; the sum of those floors over a pass's wall time is the study's efficiency (1: the
simulation costs nothing beyond the same work in plain processes on the same cores). Every
history is fingerprinted as ``history_hashes.py`` does: the engines must give the same ones (the
command exits 1 otherwise). The result goes to
``benchmarks/results/measured/study-efficiency-<time>-<commit>.json``; its table is generated into
PERFORMANCE.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from floor_replay import replay
from history_hashes import fingerprint
from measured import header, write

HERE = Path(__file__).resolve().parent
BENCH = [sys.executable, "-m", "fl_async.cli", "bench"]
OWN = ("--engine", "--jobs", "--actors", "--out")
"""Options this script sets on every bench command, refused among BENCH_ARGS."""


def bench(args: list[str], out: Path, engine: str, jobs: int, actors: int) -> float:
    """Run the suite into ``out`` with ``engine``; its wall time in seconds (exit on failure)."""
    own = ["--engine", engine, "--jobs", str(jobs), "--actors", str(actors), "--out", str(out)]
    started = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run([*BENCH, *args, *own], stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"fl-async bench exited {done.returncode}; see {out.parent / out.name}.log"
        )
    return wall


def histories(suite: Path) -> dict[str, dict]:
    """Every run's history in ``suite``, keyed ``<split>/<run>``."""
    return {
        f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
        for p in sorted(suite.glob("*/*-seed*/history.json"))
    }


def floors(runs: dict[str, dict], processes: int) -> dict[str, float]:
    """Each run's floor: its client work replayed in ``processes`` plain processes."""
    return {name: replay(history, processes)["floor-seconds"] for name, history in runs.items()}


def first_update_after(runs: dict[str, dict], suite: Path) -> float | None:
    """Seconds from the suite's first run being handed over to that run's first update."""
    records = [json.loads(p.read_text()) for p in suite.glob("*/*-seed*/bench-run.json")]
    if not records:
        return None
    first = min(records, key=lambda r: r["started"])
    directory = Path(first["run-config"]["output-dir"])
    name = f"{directory.parent.name}/{directory.name}"
    updates = runs[name]["updates"]
    started_at = time.mktime(time.strptime(runs[name]["started-at"], "%Y-%m-%dT%H:%M:%S%z"))
    return round(started_at + updates[0]["wall-time"] - first["started"], 1) if updates else None


def measure(args: argparse.Namespace, bench_args: list[str], work: Path) -> dict[str, Any]:
    """Every pass, the floors of the first pass's runs, and whether histories agree."""
    passes, prints, floor_of = [], {}, None
    for at in range(args.repeat):
        for engine in args.engines:
            out = work / f"{engine}-{at}"
            wall = bench(bench_args, out, engine, args.jobs, args.actors)
            runs = histories(out)
            prints[f"{engine}-{at}"] = {name: fingerprint(h) for name, h in runs.items()}
            if floor_of is None:
                floor_of = floors(runs, args.actors)
            studies = len(list((out / ".studies").glob("*"))) if engine == "study" else len(runs)
            passes.append(
                {
                    "engine": engine,
                    "wall": round(wall, 1),
                    "runs": len(runs),
                    "simulations": studies,
                    "updates": sum(h["num-updates"] for h in runs.values()),
                    "first-update-after": first_update_after(runs, out),
                }
            )
            print(f"{engine} pass {at}: {wall:.1f} s for {len(runs)} runs", flush=True)
    same = all(p == next(iter(prints.values())) for p in prints.values())
    return {
        "passes": passes,
        "floors": {k: round(v, 2) for k, v in floor_of.items()},
        "same-histories": same,
    }


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's options and the bench arguments after ``--``."""
    if "--" not in argv:
        raise SystemExit("give fl-async bench's arguments after --")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="study,separate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default=None)
    parser.add_argument("--work", default=None, help="keep the suites here (default: a temp dir)")
    args = parser.parse_args(argv[:split])
    args.engines = args.engines.split(",")
    bench_args = argv[split + 1 :]
    refused = [a for a in bench_args if a in OWN]
    if refused:
        raise SystemExit(f"this script sets {', '.join(refused)} itself")
    return args, bench_args


def main(argv: list[str] | None = None) -> int:
    """Measure, write the result, exit 1 when the engines' histories differ."""
    args, bench_args = parse(sys.argv[1:] if argv is None else argv)
    result = {
        **header("study-efficiency"),
        "label": args.label,
        "bench-args": bench_args,
        "jobs": args.jobs,
        "actors": args.actors,
        "engines": args.engines,
    }
    if args.work:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        result.update(measure(args, bench_args, work))
    else:
        with tempfile.TemporaryDirectory(prefix="study-efficiency-") as folder:
            result.update(measure(args, bench_args, Path(folder)))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    default = HERE / "results" / "measured" / f"study-efficiency-{stamp}-{result['commit']}.json"
    write(result, args.out or default)
    return 0 if result["same-histories"] else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
