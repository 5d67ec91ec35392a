"""Runs at a time: the same ``fl-async bench`` runs at each ``--jobs``, their wall times, and
whether every history came out the same.

Usage::

    python benchmarks/runs_at_a_time.py --strategies asgd,trendsmooth [--jobs 1,2] [--repeat 2]
        [--label TEXT] [--out DIR] [--work DIR] -- BENCH_ARGS

BENCH_ARGS are ``fl-async bench``'s (scenario, splits, seeds, rounds, run config; not
``--strategies``, ``--jobs`` or ``--out``). SSGD's runs, which set every other run's budget, are
made once first and copied into each pass's suite folder, so a pass times only ``--strategies``.
The passes alternate (``--jobs`` 1, 2, 1, 2, ... for ``--repeat`` rounds), so a drift in the
machine's load falls on every setting alike. Each pass's wall time is its whole command's. Every
history is fingerprinted as ``history_hashes.py`` does (all but wall times and Flower's random
node ids): runs at a time must not change a result. The result goes to
``benchmarks/results/measured/runs-at-a-time-<time>-<commit>.json``, its table generated into
RESULTS.md by ``benchmarks/blocks.py``; the command exits 1 when histories differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from history_hashes import fingerprint
from measured import header, load_average, write

HERE = Path(__file__).resolve().parent
BENCH = [sys.executable, "-m", "fl_async.cli", "bench"]
"""The command a pass runs (a test puts a stand-in here)."""
OWN = ("--strategies", "--jobs", "--out")
"""Options this script sets on every bench command, refused among BENCH_ARGS."""


def bench(args: list[str], out: Path, strategies: str, jobs: int) -> float:
    """Run one bench command into ``out``; its wall time in seconds (exit on failure)."""
    command = [*BENCH, *args, "--strategies", strategies, "--jobs", str(jobs), "--out", str(out)]
    started = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:  # its log's end too: a temporary work folder goes with the exit
        tail = Path(log.name).read_text(encoding="utf-8", errors="replace")[-2000:]
        raise SystemExit(f"exit {done.returncode}: {' '.join(command)}\n{tail}")
    return wall


def fingerprints(suite: Path) -> dict[str, str]:
    """Every finished run of a suite folder, keyed ``<split>/<run>-seed<k>``: its fingerprint."""
    return {
        f"{run.parent.name}/{run.name}": fingerprint(json.loads(path.read_text("utf-8")))
        for path in sorted(suite.glob("*/*-seed*/history.json"))
        for run in [path.parent]
    }


def measure(args: list[str], strategies: str, jobs: list[int], repeat: int, work: Path) -> dict:
    """Time every pass (SSGD's runs made once, first, untimed); the passes and whether every
    pass wrote the same histories."""
    base = work / "ssgd"
    bench(args, base, "ssgd", 1)
    passes: list[dict[str, Any]] = []
    seen: dict[str, str] | None = None
    same = True
    for round_ in range(repeat):
        for j in jobs:
            out = work / f"jobs{j}-pass{round_}"
            shutil.copytree(base, out)
            load = load_average()
            wall = bench(args, out, f"ssgd,{strategies}", j)
            found = fingerprints(out)
            same = same and (seen is None or found == seen)
            seen = found if seen is None else seen
            passes.append({"jobs": j, "wall": round(wall, 3), "load": [load, load_average()]})
            print(f"jobs {j}, pass {round_ + 1}: {wall:.1f} s")
    return {"passes": passes, "runs": len(seen or {}), "same-histories": same}


def _jobs(text: str) -> list[int]:
    try:
        jobs = [int(j) for j in text.split(",")]
    except ValueError:
        jobs = []
    if not jobs or min(jobs) < 1 or len(set(jobs)) != len(jobs):
        raise argparse.ArgumentTypeError(f"--jobs must list distinct integers >= 1, got {text!r}")
    return jobs


def parse(argv: list[str]) -> argparse.Namespace:
    """The script's options, and BENCH_ARGS (after ``--``) as ``bench``."""
    at = argv.index("--") if "--" in argv else len(argv)
    ours, passed = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strategies", required=True, help="the runs timed (SSGD's are not)")
    parser.add_argument("--jobs", type=_jobs, default=[1, 2], help="runs at a time (default 1,2)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of passes (default 2)")
    parser.add_argument("--label", default="", help="a note for the table's caption")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    parser.add_argument(
        "--work",
        type=Path,
        help="a new folder for the suite folders and logs, kept (default: a "
        "temporary one, removed)",
    )
    args = parser.parse_args(ours)
    if args.work is not None and args.work.exists():
        parser.error(f"--work {args.work} exists: name a new folder")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if "ssgd" in args.strategies.split(","):
        parser.error("--strategies: SSGD's runs are made once and not timed; leave it out")
    taken = [a for a in passed if a.split("=")[0] in OWN]
    if taken:
        parser.error(f"BENCH_ARGS may not set {', '.join(taken)}: this script sets {OWN}")
    args.bench = passed
    return args


@contextmanager
def _work_folder(work: Path | None) -> Iterator[Path]:
    """``work``, made and kept; or a temporary folder, removed afterwards."""
    if work is not None:
        work.mkdir(parents=True)
        yield work
        return
    with tempfile.TemporaryDirectory() as scratch:
        yield Path(scratch)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    result = {
        **header("runs-at-a-time"),
        "label": args.label,
        "bench-args": args.bench,
        "strategies": args.strategies,
        "jobs": args.jobs,
        "repeat": args.repeat,
    }
    with _work_folder(args.work) as work:
        result.update(measure(args.bench, args.strategies, args.jobs, args.repeat, work))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    write(result, args.out / f"runs-at-a-time-{stamp}-{result['commit']}.json")
    if not result["same-histories"]:
        print("the histories differ between passes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    raise SystemExit(main())
