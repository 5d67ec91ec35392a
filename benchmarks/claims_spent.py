"""The claims study's compute spent so far against its estimate, suite by suite.

Usage::

    python benchmarks/claims_spent.py --compute RESULT [--label ..] RECORDS_FOLDER ...

RESULT is a ``claims_compute.py`` result (the estimate); each RECORDS_FOLDER is a suite's records
folder, named as its suite (``benchmarks/results/suites/claims-a-dir``). For each suite: the runs
finished, of the runs it plans (its runs per seed x the estimate's seeds); the estimate's hours
for those same runs (each run's input wall time, its mean over the input seeds, x R / 10 x the
suite's factor, divided by the pace two runs at a time do); and the hours the machine spent on
them: the union of their runs' intervals, each from the run's ``started-at`` for its
``wall-time``. That counts the strategy's loop only, not the launcher's start (10 to 20 s a run);
for a run resumed from its checkpoint under an fl-async that did not keep the wall time across a
resume, its last part only; and not the parts of runs cut off and started again. So it is a
lower bound. The result goes to ``benchmarks/results/measured/claims-spent-<time>-<commit>.json``;
its table is generated into RESULTS.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from claims_compute import INPUT_ROUNDS
from measured import header, write

from fl_async.app.results import STARTED_AT
from fl_async.bench.records import load_records
from fl_async.files import read_json

HERE = Path(__file__).resolve().parent


def covered_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the ``(start, end)`` intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def interval(record: Mapping[str, Any]) -> tuple[float, float]:
    """The run's ``(start, end)`` in epoch seconds: its start and its strategy's wall time."""
    start = datetime.strptime(record["run"]["started-at"], STARTED_AT).timestamp()
    return start, start + float(record["summary"]["wall-time"])


def run_hours(suite: Mapping[str, Any], run: str) -> float:
    """The estimate's hours for one run of ``suite`` (a ``claims_compute`` suite entry), one at
    a time: its input's mean wall time over the input seeds x R / 10 x the factor."""
    walls = suite["inputs"][suite["runs"][run]]
    scale = suite["rounds"] / INPUT_ROUNDS * suite["factor"]
    return sum(walls.values()) / len(walls) * scale / 3600


def suite_spent(
    suite: Mapping[str, Any], records: Mapping[str, Any], *, seeds: int, two_at_a_time: float
) -> dict[str, Any]:
    """One suite's runs finished, their estimated hours and the hours spent on them."""
    runs = {run: by_seed for split in records.values() for run, by_seed in split.items()}
    unplanned = sorted(set(runs) - set(suite["runs"]))
    if unplanned:
        raise SystemExit(f"{suite['name']}: runs {', '.join(unplanned)} are not in the estimate")
    pace = suite.get("pace", two_at_a_time)
    finished = [(run, record) for run, by_seed in runs.items() for record in by_seed.values()]
    estimate = sum(run_hours(suite, run) for run, _ in finished) / pace
    spent = covered_seconds(interval(record) for _, record in finished) / 3600
    return {
        "name": suite["name"],
        "planned": len(suite["runs"]) * seeds,
        "finished": len(finished),
        "pace": pace,
        "estimate-hours": estimate,
        "suite-estimate-hours": suite["hours"] / pace,
        "spent-hours": spent,
        "first-start": min((r["run"]["started-at"] for _, r in finished), default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compute", type=Path, required=True, help="a claims_compute result")
    parser.add_argument("folders", type=Path, nargs="+", help="the suites' records folders")
    parser.add_argument("--label", default="", help="a note for the table's caption")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    args = parser.parse_args()
    compute = read_json(args.compute, "claims-compute result", keys=("suites", "seeds"))
    suites = {suite["name"]: suite for suite in compute["suites"]}
    result = {**header("claims-spent"), "label": args.label, "compute": args.compute.name}
    result["suites"] = []
    for folder in args.folders:
        if folder.name not in suites:
            raise SystemExit(f"{folder}: no suite {folder.name!r} in {args.compute}")
        spent = suite_spent(
            suites[folder.name],
            load_records(folder),
            seeds=compute["seeds"],
            two_at_a_time=compute["two-at-a-time"],
        )
        result["suites"].append(spent)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    write(result, args.out / f"claims-spent-{stamp}-{result['commit']}.json")


if __name__ == "__main__":
    main()
