"""The claims study's budget rule on development seeds: SSGD rounds until its curve is flat.

Usage::

    python benchmarks/claims_budget.py SUITE [SUITE ...] [--step 10] [--out DIR]

Each SUITE is an ``fl-async bench`` suite folder whose SSGD runs went long (``--rounds 60``),
on development seeds. SSGD is evaluated at every round and its model changes only then, so the
comparison grid over its first R rounds follows exactly from one long run (``derive_grid`` with
the budget at round R): no run per R is needed. For every R in ``step, 2 step, ...`` the result
holds each seed's flatness (``claims.paired.flatness``: the last quarter's mean grid
accuracy minus the third quarter's, in points, from counts of correct test examples) and the
rule's choice: the smallest R whose mean over the seeds, a negative flatness counted as 0
(``climbing``), is at most ``FLAT`` points. The result
goes to ``benchmarks/results/measured/claims-budget-<time>-<commit>.json``; its table is
generated into RESULTS.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from claims.paired import POINT_DIGITS, Run, climbing, flatness
from claims.table import FLAT
from measured import header, write

from fl_async.bench.grid import DEFAULT_GRID, derive_grid
from fl_async.files import read_json

HERE = Path(__file__).resolve().parent


def flatness_at(history: dict[str, Any], rounds: int, grid: int = DEFAULT_GRID) -> dict[str, Any]:
    """SSGD's flatness and final accuracy (points) over its first ``rounds`` rounds."""
    at = [e for e in history["evaluations"] if e.get("server-step") == rounds]
    if not at:
        raise SystemExit(f"the SSGD run has no evaluation at round {rounds}")
    points = derive_grid(history, grid, budget=float(at[0]["virtual-time"]))
    tests = int(history["dataset"]["test-examples"])
    run = Run(tuple(round(p["accuracy"] * tests) for p in points), tests, None)
    return {"flatness": flatness(run), "final": round(100 * run.final / tests, POINT_DIGITS)}


def split_result(split: Path, step: int) -> dict[str, Any]:
    """Every seed's flatness at each R of the ladder, and the rule's choice for the split."""
    histories = {
        int(folder.name.removeprefix("ssgd-seed")): read_json(
            folder / "history.json", "an SSGD history"
        )
        for folder in sorted(split.glob("ssgd-seed*"))
        if (folder / "history.json").is_file()
    }
    if not histories:
        raise SystemExit(f"{split}: no finished SSGD run (ssgd-seed*/history.json)")
    longest = min(int(h["server-steps"]) for h in histories.values())
    ladder = list(range(step, longest + 1, step))
    seeds = {
        str(seed): [flatness_at(history, r) for r in ladder] for seed, history in histories.items()
    }
    means = [climbing([s[i]["flatness"] for s in seeds.values()]) for i in range(len(ladder))]
    chosen = next((r for r, m in zip(ladder, means, strict=True) if m <= FLAT), None)
    config = next(iter(histories.values()))["config"]
    return {
        "dataset": config.get("dataset"),
        "nodes": config.get("num-nodes"),
        "scheme": config.get("partition.scheme"),
        "rounds": ladder,
        "seeds": seeds,
        "mean": means,
        "chosen": chosen,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suites", nargs="+", type=Path, help="bench suite folders (SSGD runs)")
    parser.add_argument("--step", type=int, default=10, help="the ladder of R (default: 10)")
    parser.add_argument("--label", default="", help="a note for the table's caption")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    args = parser.parse_args()
    result = {**header("claims-budget"), "label": args.label, "threshold": FLAT, "splits": {}}
    for suite in args.suites:
        for split in sorted(p for p in suite.iterdir() if p.is_dir()):
            result["splits"][f"{suite.name}/{split.name}"] = split_result(split, args.step)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    write(result, args.out / f"claims-budget-{stamp}-{result['commit']}.json")


if __name__ == "__main__":
    main()
