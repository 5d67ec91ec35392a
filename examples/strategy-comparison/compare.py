"""Run several strategies on the same partitions, node speeds and seed; print one line each.

    python examples/strategy-comparison/compare.py --strategies ssgd,asgd,gsgm --rounds 10

Each run is the main job (``python -m fl_async.app``) with another ``strategy``; everything else
(dataset, Dirichlet split, lognormal node speeds, seed) is the same, so the differences come from
the strategies alone. For several seeds, stability and time-to-accuracy tables, use the
benchmark harness instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from fl_async.app.launch import main as launch
from fl_async.strategies import PRESETS
from fl_async.validation import InvalidArgument, check_int

ROOT = Path(__file__).resolve().parents[2]


def compare(
    strategies: list[str], *, rounds: int, nodes: int, seed: int, out: Path, actors: int | None
) -> list[dict]:
    """Run each strategy once (``actors`` ClientApps at once; None: the launcher's default, one
    per core); return its summary (final accuracy, virtual time, staleness)."""
    rows = []
    at_once = [] if actors is None else ["--actors", str(actors)]
    for name in strategies:
        directory = out / name
        code = launch(
            [
                "--app", str(ROOT), "--nodes", str(nodes), *at_once, "--run-config",
                f"strategy='{name}' num-rounds={rounds} seed={seed} output-dir='{directory}'",
            ]
        )  # fmt: skip
        if code != 0:
            raise SystemExit(f"the {name} run failed (exit code {code}); see its log above")
        history = json.loads((directory / "history.json").read_text())
        staleness = [u["staleness"] for u in history["updates"]] or [0]
        rows.append(
            {
                "strategy": name,
                "final-accuracy": history["final-accuracy"],
                "virtual-time": history["virtual-time"],
                "updates": history["num-updates"],
                "mean-staleness": statistics.fmean(staleness),
                "max-staleness": max(staleness),
            }
        )
    return rows


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
