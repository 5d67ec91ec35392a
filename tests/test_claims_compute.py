"""benchmarks/claims_compute.py: the claims study's hours from runs at 10 SSGD rounds, each suite
run standing for its input run, a capped input extrapolated to its budget, and its table."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from bench_fakes import result_header

ROOT = Path(__file__).resolve().parents[1]
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    claims_compute = importlib.import_module("claims_compute")
    compute_table = importlib.import_module("tables.claims_compute")


def _record(wall: float, stopped_by: str = "max-virtual-time", reached: float = 100.0) -> dict:
    return {
        "summary": {"wall-time": wall, "stopped-by": stopped_by, "virtual-time": reached},
        "grid": {"budget": 100.0},
    }


PLAN = {
    "scenario": "a",
    "source": "sweep",
    "split": "dirichlet",
    "rounds": 30,
    "factor": 1.5,
    "runs": {
        "ssgd": "tuned:ssgd",
        "asgd": "tuned:asgd",
        "ssp": "tuned:asgd",
        "fedbuff-default": "default:fedbuff",
    },
}
TUNED = {"chosen": {"ssgd": {"name": "ssgd"}, "asgd": {"name": "asgd-lr0.2"}}}


def test_each_run_stands_for_its_input_and_the_hours_scale_by_rounds_seeds_and_factor() -> None:
    records = {
        "ssgd": {0: _record(20.0), 1: _record(40.0), 2: _record(30.0)},
        "asgd-lr0.2": {0: _record(100.0), 1: _record(200.0)},  # seed 2 not run yet
        "fedbuff": {0: _record(60.0), 1: _record(450.0, "max-wall-time", reached=50.0)},
    }
    found = claims_compute.suite_estimate(PLAN, records, TUNED)
    assert found["runs"]["ssp"] == "asgd-lr0.2" and found["runs"]["fedbuff-default"] == "fedbuff"
    assert found["input-seeds"] == [0, 1]  # only seeds every input run has
    assert found["inputs"]["fedbuff"] == {"0": 60.0, "1": 900.0}  # capped: to its budget
    # seed 0: 20 + 100 + 100 + 60 = 280; seed 1: 40 + 200 + 200 + 900 = 1340
    assert found["wall-per-seed"] == 810.0
    assert found["hours"] == pytest.approx(810.0 * 3 * 1.5 * 10 / 3600)
    assert found["longest"] == {"run": "fedbuff", "seed": 1, "hours": 900.0 * 3 * 1.5 / 3600}
    with pytest.raises(SystemExit, match="sweep/dirichlet: no input runs asgd-lr0.2"):
        claims_compute.suite_estimate(PLAN, {"ssgd": records["ssgd"]}, TUNED)

    result = {
        **result_header("2026-11-28"),
        "seeds": 10,
        "two-at-a-time": 1.2,
        "suites": [{"name": "claims-a-dir", "folder": "sweep", **found}],
    }
    text = compute_table.table(result)
    assert "| claims-a-dir | 4 | sweep, dirichlet, seeds 0, 1 | 810 | 30 | 1.5 | 10.1 |" in text
    assert "fedbuff seed 1: 1.12 |" in text
    assert "two at a time (1.2 times the work an hour): 8 hours" in text


def test_a_run_longer_than_a_session_is_named() -> None:
    suite = {
        "runs": {"ssgd": "ssgd"},
        "folder": "f",
        "split": "d",
        "input-seeds": [0],
        "wall-per-seed": 4000.0,
        "rounds": 30,
        "factor": 1.0,
        "hours": 33.3,
        "longest": {"run": "asgd", "seed": 0, "hours": 3.0},
    }
    row = compute_table._row("claims-b", suite)
    assert row.endswith("asgd seed 0: 3.00 (longer than a session) |")


def test_a_suite_with_defaults_also_runs_each_preset_chosen_off_its_default_at_it() -> None:
    plan = {
        **PLAN,
        "runs": {"ssgd": "tuned:ssgd", "asgd": "tuned:asgd"},
        claims_compute.DEFAULTS: True,
    }
    records = {
        "ssgd": {0: _record(20.0)},
        "asgd-lr0.2": {0: _record(100.0)},
        "asgd": {0: _record(50.0)},
    }
    found = claims_compute.suite_estimate(plan, records, TUNED)
    # ssgd's point is its default: no ssgd-default
    assert found["runs"] == {"ssgd": "ssgd", "asgd": "asgd-lr0.2", "asgd-default": "asgd"}
    assert found["wall-per-seed"] == 170.0


def test_a_cut_suite_is_marked_and_counted_apart() -> None:
    suite = {
        "runs": {"ssgd": "ssgd"},
        "folder": "f",
        "split": "d",
        "input-seeds": [0],
        "wall-per-seed": 100.0,
        "rounds": 30,
        "factor": 1.0,
        "hours": 12.0,
        "longest": {"run": "ssgd", "seed": 0, "hours": 0.5},
    }
    result = {
        **result_header("2026-11-28"),
        "seeds": 10,
        "two-at-a-time": 1.2,
        "suites": [
            {"name": "claims-a-dir", **suite},
            {"name": "claims-b", **suite, "hours": 6.0, "cut": True},
        ],
    }
    text = compute_table.table(result)
    assert "| claims-b (cut) | 1 |" in text and "| claims-a-dir | 1 |" in text
    assert "| all run | | | | | | 12.0 | |" in text
    assert "| with the cut suites | | | | | | 18.0 | |" in text
    assert text.endswith(
        "two at a time (1.2 times the work an hour): 10 hours. "
        "With the cut suites: 18 and 15 hours."
    )
    assert claims_compute.CUT == ("claims-a-ls", "claims-b", "claims-s100")
    assert list(claims_compute.SUITES)[:5] == [
        "claims-a-dir",
        "claims-alpha0.05",
        "claims-alpha0.5",
        "claims-alpha1.0",
        "claims-s30",
    ]


def _runs_at_a_time(path: Path, jobs: list[int], walls: list[float], *bench: str) -> Path:
    passes = [{"jobs": j, "wall": w} for j, w in zip(jobs, walls, strict=True)]
    path.write_text(
        json.dumps({"jobs": sorted(set(jobs)), "passes": passes, "bench-args": list(bench)})
    )
    return path


def test_two_at_a_time_is_paced_by_the_runs_at_a_time_result_of_its_scenario(
    tmp_path: Path,
) -> None:
    s30 = _runs_at_a_time(tmp_path / "s.json", [1, 2], [300.0, 200.0], "--scenario", "s")
    mnist = _runs_at_a_time(tmp_path / "a.json", [1, 2, 1, 2], [100.0, 99.0, 104.0, 101.0])
    paces = claims_compute.read_paces([s30, mnist])  # no --scenario: bench's default, a
    assert paces == {
        "s": {"pace": 1.5, "pace-from": "s.json"},
        "a": {"pace": 1.02, "pace-from": "a.json"},
    }
    b = _runs_at_a_time(tmp_path / "b.json", [1, 2], [100.0, 80.0], "--scenario=b", "--seeds", "0")
    assert claims_compute.read_paces([b]) == {"b": {"pace": 1.25, "pace-from": "b.json"}}
    four = _runs_at_a_time(tmp_path / "four.json", [1, 4], [300.0, 150.0])
    with pytest.raises(SystemExit, match=r"four.json: measures --jobs \[1, 4\]; needs 1 and 2"):
        claims_compute.read_paces([four])

    suite = {
        "runs": {"ssgd": "ssgd"},
        "folder": "f",
        "split": "d",
        "input-seeds": [0],
        "wall-per-seed": 100.0,
        "rounds": 30,
        "factor": 1.0,
        "longest": {"run": "ssgd", "seed": 0, "hours": 0.5},
    }
    suites = [
        {"name": "claims-a-dir", **suite, "hours": 30.0, "scenario": "a", **paces["a"]},
        {"name": "claims-s30", **suite, "hours": 15.0, "scenario": "s", **paces["s"]},
        {"name": "claims-b", **suite, "hours": 12.0, "scenario": "b"},
    ]
    result = {
        **result_header("2026-11-28"),
        "seeds": 10,
        "two-at-a-time": 1.2,
        "suites": suites,
    }
    text = compute_table.table(result)
    # 30 / 1.02 + 15 / 1.5 + 12 / 1.2 = 29.4 + 10 + 10
    assert text.endswith(
        "two at a time (scenario (a) 1.02 times the work an hour, measured (a.json); scenario "
        "(s) 1.5 times the work an hour, measured (s.json); the others 1.2, assumed): 49 hours."
    )
