"""Run several strategies on the same partitions, node speeds and seed; print one line each.

    python examples/strategy-comparison/compare.py --strategies ssgd,asgd,gsgm --rounds 10

Each run is the main job with another ``strategy``; everything else (dataset, Dirichlet split,
lognormal node speeds, seed) is the same, so the differences come from the strategies alone.
All of them run in one Flower simulation, side by side (``fl-async bench``'s study engine): the
simulation starts once, and one run's actors train while another's server waits. For several
seeds, stability and time-to-accuracy tables, use the benchmark harness instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
from pathlib import Path

from fl_async.bench.engines import Study
from fl_async.strategies import PRESETS
from fl_async.validation import InvalidArgument, check_int

ROOT = Path(__file__).resolve().parents[2]


def compare(
    strategies: list[str], *, rounds: int, nodes: int, seed: int, out: Path, actors: int | None
) -> list[dict]:
    """Run each strategy once, all in one simulation (``actors`` ClientApps at once; None: one
    per core); return each one's summary (final accuracy, virtual time, staleness)."""
    study = Study(
        out, app_dir=ROOT, actors=actors or os.cpu_count() or 1, runs_at_a_time=len(strategies)
    )
    codes: dict[str, int] = {}

    def run(name: str) -> None:
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "strategy": name,
            "num-rounds": rounds,
            "seed": seed,
            "num-nodes": nodes,
            "output-dir": str(directory),
        }
        codes[name] = study.run(config, directory, directory / "launch.log")
        print(f"{name}: done (exit code {codes[name]}); its log: {directory / 'run.log'}")

    threads = [threading.Thread(target=run, args=(name,)) for name in strategies]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        study.close()
    failed = [name for name in strategies if codes.get(name) != 0]
    if failed:
        raise SystemExit(f"the runs of {failed} failed; see their run.log under {out}")
    return [summary(name, out / name / "history.json") for name in strategies]


def summary(name: str, path: Path) -> dict:
    """One run's line of the table, from its ``history.json``."""
    history = json.loads(path.read_text())
    staleness = [u["staleness"] for u in history["updates"]] or [0]
    return {
        "strategy": name,
        "final-accuracy": history["final-accuracy"],
        "virtual-time": history["virtual-time"],
        "updates": history["num-updates"],
        "mean-staleness": statistics.fmean(staleness),
        "max-staleness": max(staleness),
    }


def table(rows: list[dict]) -> str:
    """A Markdown table of the summaries."""
    lines = [
        "| strategy | final accuracy | virtual time | updates | staleness mean / max |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['strategy']} | {r['final-accuracy']:.3f} | {r['virtual-time']:.0f} | "
            f"{r['updates']} | {r['mean-staleness']:.2f} / {r['max-staleness']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="ssgd,asgd,gsgm", help="comma-separated presets")
    parser.add_argument("--rounds", type=int, default=10, help="budget: rounds x nodes updates")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "comparison")
    parser.add_argument(
        "--actors", type=int, default=None, help="ClientApps at once (default: one per core)"
    )
    args = parser.parse_args(argv)
    strategies = [s.strip().lower() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(strategies) - set(PRESETS))
    if unknown or not strategies:
        parser.error(f"unknown strategies {unknown}; allowed: {sorted(PRESETS)}")
    if args.actors is not None:
        try:
            check_int("--actors", args.actors, minimum=1)
        except InvalidArgument as error:
            parser.error(str(error))
    rows = compare(
        strategies,
        rounds=args.rounds,
        nodes=args.nodes,
        seed=args.seed,
        out=args.out,
        actors=args.actors,
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
