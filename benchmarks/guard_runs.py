"""The update guard on honest runs: refusals, nodes that left, how far honest updates reach.

Usage::

    python benchmarks/guard_runs.py SUITE [SUITE ...] [--label TEXT] [--out DIR]

Each SUITE is an ``fl-async bench`` suite folder. For every run (``<split>/<run>-seed<k>/``) the
result holds the updates its guard refused as too large and how many nodes sent them, the nodes
that left the run (its
``run.log``'s "leaves the run" lines), its final accuracy and its number of updates; and, where
the history holds each update's ``update-norm``, the largest ratio of an update's norm to each of
two references over the accepted norms before it, and how many updates (of how many nodes) exceed
``FACTOR`` times it:

- ``per-update``: the median of the last ``WINDOW`` accepted updates' norms (the guard before
  one vote per node);
- ``per-node``: the median, over the last ``WINDOW`` nodes accepted, of each one's latest
  accepted norm (the guard with one vote per node).

A run whose guard never refuses (``guard.factor=1e9``) gives these on honest updates alone. The
result goes to ``benchmarks/results/measured/guard-runs-<time>-<commit>.json``; its table is
generated into RESULTS.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

from measured import header, write

from fl_async.files import read_json

HERE = Path(__file__).resolve().parent
WINDOW = 50
"""The guard's default window, for both references."""
FACTOR = 10.0
"""The guard's default factor."""
LEFT = re.compile(r"node with stable id (\d+) leaves the run")


def ratios(updates: list[tuple[int, float, bool]]) -> dict[str, list[tuple[int, float]]]:
    """Each update's node and norm over both references, from the accepted updates before it
    (``updates``: stable id, norm, accepted, in the order applied)."""
    recent: deque[float] = deque(maxlen=WINDOW)
    votes: OrderedDict[int, float] = OrderedDict()
    found: dict[str, list[tuple[int, float]]] = {"per-update": [], "per-node": []}
    for node, norm, accepted in updates:
        if recent:
            found["per-update"].append((node, norm / statistics.median(recent)))
            found["per-node"].append((node, norm / statistics.median(votes.values())))
        if accepted:
            recent.append(norm)
            votes.pop(node, None)
            votes[node] = norm
            while len(votes) > WINDOW:
                votes.popitem(last=False)
    return found


def run_result(folder: Path) -> dict[str, Any]:
    """One run's refusals, departures, accuracy and (where measured) its ratios."""
    history = read_json(folder / "history.json", "a run's history")
    log = folder / "run.log"
    left = set(LEFT.findall(log.read_text(errors="replace"))) if log.is_file() else set()
    measured = [
        (int(u["stable-id"]), float(u["update-norm"]), bool(u["accepted"]))
        for u in history["updates"]
        if "update-norm" in u
    ]
    too_large = int(history["rejected"].get("too-large", 0))
    refused = [u["stable-id"] for u in history["updates"] if not u["accepted"]]
    result: dict[str, Any] = {
        "refused": too_large,
        # An update record does not say why it was refused: its nodes are those of the
        # too-large refusals only when every refusal was one.
        "refused-nodes": len(set(refused)) if len(refused) == too_large else None,
        "left": len(left),
        "nodes": int(history["num-nodes"]),
        "final-accuracy": round(100 * float(history["final-accuracy"]), 1),
        "updates": len(history["updates"]),
    }
    if measured and len(measured) == len(history["updates"]):
        for name, found in ratios(measured).items():
            over = [node for node, r in found if r > FACTOR]
            result[name] = {
                "max": round(max(r for _, r in found), 1),
                "over": len(over),
                "over-nodes": len(set(over)),
            }
    return result


def suite_result(suite: Path) -> dict[str, Any]:
    """Every finished run of a suite, keyed ``<split>/<run>-seed<k>``."""
    return {
        f"{folder.parent.name}/{folder.name}": run_result(folder)
        for folder in sorted(suite.glob("*/*-seed*"))
        if (folder / "history.json").is_file()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suites", nargs="+", type=Path, help="bench suite folders")
    parser.add_argument("--label", default="", help="a note for the table's caption")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    args = parser.parse_args()
    result = {**header("guard-runs"), "label": args.label, "factor": FACTOR, "window": WINDOW}
    result["suites"] = {suite.name: suite_result(suite) for suite in args.suites}
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    write(result, args.out / f"guard-runs-{stamp}-{result['commit']}.json")


if __name__ == "__main__":
    main()
