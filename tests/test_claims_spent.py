"""benchmarks/claims_spent.py: the claims study's hours spent on its finished runs (the union of
their intervals) against the estimate's hours for the same runs, and its table."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    claims_spent = importlib.import_module("claims_spent")
    spent_table = importlib.import_module("tables.claims_spent")

SUITE = {
    "name": "claims-x",
    "rounds": 30,
    "factor": 1.5,
    "hours": 12.0,
    "pace": 1.5,
    "runs": {"ssgd": "ssgd", "asgd": "asgd-lr0.2", "ssp": "asgd-lr0.2"},
    "inputs": {"ssgd": {"0": 100.0, "1": 300.0}, "asgd-lr0.2": {"0": 400.0, "1": 800.0}},
}


def _record(started: str, wall: float) -> dict:
    return {"run": {"started-at": started}, "summary": {"wall-time": wall}}


def test_the_covered_time_counts_overlapping_runs_once() -> None:
    covered = claims_spent.covered_seconds([(0, 10), (5, 12), (20, 30), (21, 22), (12, 13)])
    assert covered == 13 + 10
    assert claims_spent.covered_seconds([]) == 0.0


def test_a_suites_finished_runs_are_estimated_run_by_run_and_their_time_is_their_union() -> None:
    records = {
        "dirichlet": {
            "ssgd": {40: _record("2026-11-28T10:00:00+0000", 1800.0)},
            "asgd": {
                40: _record("2026-11-28T10:10:00+0000", 3600.0),
                41: _record("2026-11-28T12:00:00+0000", 360.0),
            },
        }
    }
    found = claims_spent.suite_spent(SUITE, records, seeds=10, two_at_a_time=1.2)
    assert (found["finished"], found["planned"]) == (3, 30)
    # one run, one at a time: its input's mean wall s x 30 / 10 x 1.5; ssgd 200 s, asgd 600 s
    per_run = {"ssgd": 200 * 4.5 / 3600, "asgd": 600 * 4.5 / 3600}
    assert found["estimate-hours"] == pytest.approx((per_run["ssgd"] + 2 * per_run["asgd"]) / 1.5)
    # 10:00 to 11:10 (the two overlap), then 12:00 to 12:06
    assert found["spent-hours"] == pytest.approx(70 / 60 + 6 / 60)
    assert found["suite-estimate-hours"] == pytest.approx(12.0 / 1.5)
    assert found["first-start"] == "2026-11-28T10:00:00+0000"


def test_a_run_the_estimate_does_not_plan_is_refused_by_name() -> None:
    records = {"dirichlet": {"fedbuff": {40: _record("2026-11-28T10:00:00+0000", 60.0)}}}
    with pytest.raises(SystemExit, match="claims-x: runs fedbuff are not in the estimate"):
        claims_spent.suite_spent(SUITE, records, seeds=10, two_at_a_time=1.2)


def test_the_committed_records_against_the_committed_estimate(tmp_path, monkeypatch) -> None:
    folder = ROOT / "benchmarks" / "results" / "suites" / "claims-a-dir"
    compute = sorted((ROOT / "benchmarks" / "results" / "measured").glob("claims-compute-*"))[-1]
    argv = ["claims_spent.py", "--compute", str(compute), str(folder), "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    claims_spent.main()
    (written,) = tmp_path.glob("claims-spent-*.json")
    result = json.loads(written.read_text())
    (suite,) = result["suites"]
    assert suite["finished"] == len(list(folder.glob("*/*.json")))
    assert suite["planned"] == 18 * 10 and suite["spent-hours"] > 0 and suite["estimate-hours"] > 0
    table = spent_table.table(result)
    assert f"| claims-a-dir | {suite['finished']} of 180 | " in table
    monkeypatch.setattr(sys, "argv", [*argv[:3], str(tmp_path / "claims-zz"), *argv[4:]])
    with pytest.raises(SystemExit, match="no suite 'claims-zz'"):
        claims_spent.main()
