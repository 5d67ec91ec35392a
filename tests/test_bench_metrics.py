"""fl_async.bench without Flower: metrics, bootstrap statistics, evaluation grids and the report,
on hand-made histories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_fakes import SUITE, old, run, ssgd, write_runs

from fl_async.bench import metrics, stats
from fl_async.bench.grid import NO_GRID, derive_grid, grid_note, run_grid
from fl_async.bench.records import make_record
from fl_async.bench.report import (
    HELD,
    load_runs,
    record_metrics,
    run_metrics,
    split_metrics,
    write_report,
)
from fl_async.bench.summary import summarize
from fl_async.bench.sweep import SweepGrid
from fl_async.bench.table import markdown_table, per_seed_table
from fl_async.bench.tuning import score_points
from fl_async.validation import InvalidArgument

T_ODD = 141.12173816854033
"""In floating point T * 15 / 30 > T / 2 and T * 30 / 30 != T: the grid's rounding cases."""

# ------------------------------------------------------------------------------- metrics


def test_metrics_of_a_series() -> None:
    times, accuracies = [10, 20, 30, 40, 50, 60], [0.5, 0.7, 0.8, 0.9, 0.8, 0.9]
    assert metrics.sigma_acc(times, accuracies) == pytest.approx(np.std([0.9, 0.8, 0.9]))
    assert metrics.mean_abs_change(times, accuracies) == pytest.approx(0.1)  # t > 30
    assert metrics.sigma_acc(times, accuracies, budget=100) == 0.0  # only t = 60 > 50
    assert metrics.mean_abs_change(times, accuracies, budget=100) is None
    assert metrics.sigma_acc([], []) is None
    grid = [T_ODD * i / 30 for i in range(1, 31)]  # point 15 lies a hair above T / 2
    assert metrics.second_half(grid, list(range(30)), T_ODD).tolist() == list(range(15, 30))
    assert metrics.time_to_accuracy(times, accuracies, 0.8) == 30
    assert metrics.time_to_accuracy([None, 1.0, 2.0, 3.0, 4, 5], accuracies, 0.5) is None
    assert metrics.time_to_accuracy(times, accuracies, 0.95) is None
    assert metrics.converged([0.0, 0.9, 0.9, 0.9, 0.9, 0.9], [0.1, 1.0, 1, 1, 1, 1]) is True
    assert metrics.converged([0.9, 0.89, 0.89, 0.89, 0.89, 0.89], [1.0]) is False
    assert metrics.converged([], [1.0]) is None


# ---------------------------------------------------------------------------- statistics


def test_a_consistent_gain_excludes_zero_a_noisy_one_spans_it() -> None:
    found = stats.paired(stats.mean, [0.10, 0.12, 0.11, 0.13, 0.09])
    assert found.value == pytest.approx(0.11) and found.seeds == 5
    assert 0.09 <= found.low < 0.11 < found.high <= 0.13 and found.distinguishable() is True
    found = stats.paired(stats.mean, [-0.1, 0.1, -0.05, 0.05, 0.0])
    assert found.low < 0 < found.high and found.distinguishable() is False
    # resampled means of (0, 1) are 0, 1/2, 1 with chances 1/4, 1/2, 1/4: 2.5/97.5% -> 0, 1
    assert stats.bootstrap_interval(stats.mean, [0.0, 1.0]) == (0.0, 1.0)


def test_the_bootstrap_is_deterministic() -> None:
    values = np.random.default_rng(5).normal(size=12).tolist()
    first = stats.bootstrap_interval(stats.mean, values)
    assert stats.bootstrap_interval(stats.mean, values) == first
    assert stats.bootstrap_interval(stats.mean, values, seed=stats.BOOTSTRAP_SEED + 1) != first


def test_a_paired_gain_resamples_seeds_with_their_pairs() -> None:
    # σ_A is half of σ_B on every seed: every resample gives 0.5
    found = stats.paired(stats.relative_reduction, [0.01, 0.02, 0.04], [0.02, 0.04, 0.08])
    assert (found.value, found.low, found.high) == pytest.approx((0.5, 0.5, 0.5))
    # resamples drawing only the seed where σ_B = 0 are undefined, and left out
    found = stats.paired(stats.relative_reduction, [0.0, 0.01], [0.0, 0.02])
    assert (found.low, found.high) == pytest.approx((0.5, 0.5))
    one = stats.paired(stats.mean, [0.2])
    assert one == stats.Estimate(0.2, None, None, 1) and one.distinguishable() is None
    assert stats.paired(stats.mean, []).value is None
    assert stats.paired(stats.relative_reduction, [0.1], [0.0]).value is None
    with pytest.raises(InvalidArgument, match=r"got sizes \[2, 1\]"):
        stats.paired(stats.relative_reduction, [0.1, 0.2], [0.3])


# --------------------------------------------------------------------------------- grids


def test_ssgd_grid_is_the_last_evaluation_at_or_before_each_grid_time() -> None:
    history = ssgd([0.1, 0.5, 0.6, 0.8])
    for e, t in zip(history["evaluations"], [0.0, 30.0, 70.0, 100.0], strict=True):
        e["virtual-time"] = t
    history["virtual-time"] = 100.0
    grid = derive_grid(history, 4)  # T = 100: 25, 50, 75, 100
    assert [g["virtual-time"] for g in grid] == [25.0, 50.0, 75.0, 100.0]
    assert [(g["server-step"], g["accuracy"], g["wall-time"]) for g in grid] == [
        (0, 0.1, 0.0),
        (1, 0.5, 2.0),
        (2, 0.6, 4.0),
        (3, 0.8, 6.0),
    ]
    # an evaluation exactly at a grid time is the model in force there
    assert [g["server-step"] for g in derive_grid(history, 10)] == [0, 0, 1, 1, 1, 1, 2, 2, 2, 3]
    # a fixed budget past the run's end: the points after it are left out
    assert len(derive_grid(history, 4, budget=200.0)) == 2
    odd = ssgd([0.1, 0.5, 0.7], step=T_ODD / 2)
    odd["virtual-time"] = T_ODD
    assert derive_grid(odd, 30)[-1]["server-step"] == 2  # T * 30 / 30 != T: still the last
    with pytest.raises(InvalidArgument, match="evaluated at every server step"):
        derive_grid(run([0.5, 0.6]), 4)


def test_run_grid_recorded_derived_or_noted() -> None:
    recorded = run_grid(run([0.5, 0.6, 0.7, 0.9]), 40)
    assert (recorded.source, recorded.size, recorded.budget) == ("recorded", 4, 400.0)
    assert recorded.walls == (3.0, 6.0, 9.0, 12.0)
    derived = run_grid(ssgd([0.1, 0.5, 0.6, 0.7, 0.8]), 8)
    assert (derived.source, derived.size, derived.budget) == ("derived", 8, 400.0)
    assert derived.accuracies == (0.1, 0.5, 0.5, 0.6, 0.6, 0.7, 0.7, 0.8)
    before = old([0.5, 0.6])
    assert run_grid(before) is None and grid_note(before, None) == NO_GRID
    stopped = run([0.5, 0.6])
    stopped.update({"grid-evaluations": [], "stopped-by": "no-progress", "virtual-time": 3.0})
    assert grid_note(stopped, None) == "no grid point (stopped by no-progress at virtual time 3)"
    cut = run([0.5, 0.6])
    cut["config"]["eval-grid"] = 4
    assert grid_note(cut, run_grid(cut)).startswith("grid 2/4 (stopped by budget")


# -------------------------------------------------------------------------------- report


def test_a_grid_that_lost_its_last_point_to_rounding_takes_the_final_evaluation() -> None:
    budget = 27636.41174326229  # budget * 4 / 4 > budget: point 4 was never taken
    complete = run([0.5, 0.6, 0.7, 0.8], budget=budget)
    lost = json.loads(json.dumps(complete))
    lost["grid-evaluations"] = lost["grid-evaluations"][:3]
    lost["virtual-time"], lost["server-steps"] = budget, 16
    lost["evaluations"][-1].update({"virtual-time": budget, "server-step": 16})
    grid = run_grid(lost, 4)
    assert grid.complete and grid.accuracies == (0.5, 0.6, 0.7, 0.8)
    assert grid.times[-1] == budget * 4 / 4
    # not when the final evaluation came after the grid time, or is of an older version,
    # or when more than the last point is missing
    later = json.loads(json.dumps(lost))
    later["evaluations"][-1]["virtual-time"] = budget + 1.0
    older = json.loads(json.dumps(lost))
    older["server-steps"] = 17
    short = json.loads(json.dumps(lost))
    short["grid-evaluations"] = short["grid-evaluations"][:2]
    for history in (later, older, short):
        assert not run_grid(history, 4).complete


def test_run_metrics_on_the_grid_relative_to_ssgd() -> None:
    found = run_metrics(SUITE["asgd"][0], SUITE["ssgd"][0], 4)
    assert found["final-accuracy"] == 0.9 and found["grid-source"] == "recorded"
    assert (found["sigma-acc"], found["mean-abs-change"]) == pytest.approx((0.1, 0.2))
    assert found["accuracy-difference"] == pytest.approx(0.1)
    assert (found["time-to-target"], found["baseline-time-to-target"]) == (200.0, 400.0)
    assert (found["wall-to-target"], found["baseline-wall-to-target"]) == (6.0, 8.0)
    assert (found["time-ratio"], found["wall-ratio"]) == (0.5, 0.75)
    assert found["time-ratio-90"] == 0.5 and found["converged"] is True  # 0.72 at 200, 300
    assert (found["applied"], found["rejected"], found["max-staleness"]) == (10, 1, 9)
    assert run_metrics(SUITE["ssgd"][0], SUITE["ssgd"][0], 4)["time-ratio"] == 1.0
    missing = run_metrics(SUITE["fedbuff"][1], SUITE["ssgd"][1], 4)
    assert missing["note"] == NO_GRID and "final-accuracy" not in missing
    # stopped before its grid's end (e.g. by max-wall-time): its last point is no final accuracy
    cut = run([0.5, 0.6])
    cut["config"]["eval-grid"], cut["stopped-by"] = 4, "max-wall-time"
    short = run_metrics(cut, SUITE["ssgd"][0], 4)
    assert short["note"].startswith("grid 2/4 (stopped by max-wall-time")
    assert "final-accuracy" not in short and "sigma-acc" not in short


def test_a_run_that_ends_by_its_own_rule_counts_at_its_final_accuracy() -> None:
    """As the claims read it: a run that diverged and ended (every node left) is not left out of
    the strategy's means, which would show only its good seeds; the tuning sweep's rule is not
    changed by it (its point takes no part)."""
    ended = run([0.6, 0.8, 0.85, 0.9])
    ended["grid-evaluations"] = ended["grid-evaluations"][:2]
    ended.update({"stopped-by": "no-active-nodes", "final-accuracy": 0.1})
    found = run_metrics(ended, SUITE["ssgd"][0], 4)
    assert found["grid-accuracies"] == [0.6, 0.8, 0.1, 0.1] and found["final-accuracy"] == 0.1
    assert found["note"] == f"grid 2/4 (stopped by no-active-nodes at virtual time 401); {HELD}"
    assert found["accuracy-difference"] == pytest.approx(0.1 - 0.8)
    assert found["time-to-target"] == 200.0 and found["converged"] is False  # 0.8, then 0.1
    row = summarize({"ssgd": {0: run_metrics(SUITE["ssgd"][0], None, 4)}, "mifa": {0: found}})[1]
    assert (row["accuracy-mean"], row["grid-seeds"]) == (0.1, [0])
    assert "final-accuracy" not in record_metrics(make_record(ended), hold_final=False)
    names = {"mifa": {0: make_record(run([0.9] * 4))}, "mifa-lr0.5": {0: make_record(ended)}}
    grid = SweepGrid(Path("grid.toml"), {"mifa": {"lr": ("auto", 0.5)}})
    kept, held = score_points(grid, "mifa", {"dirichlet": names})
    assert kept.finals == (0.9,) and held.finals == ()
    assert held.missing == (f"dirichlet seed 0: {found['note'].removesuffix(f'; {HELD}')}",)
    # ended by a fault, or by the machine: cut off, left out as before
    for stop, faults in (("no-active-nodes", {"timeout": 3}), ("no-nodes", {})):
        ended.update({"stopped-by": stop, "faults": faults})
        assert "final-accuracy" not in run_metrics(ended, SUITE["ssgd"][0], 4)


def test_summary_table_with_intervals() -> None:
    per_run = split_metrics(SUITE, 40)  # SSGD's derived grid takes the others' G = 4
    assert per_run["ssgd"][0]["grid-size"] == 4
    rows = summarize(per_run)
    assert [r["strategy"] for r in rows] == ["ssgd", "gsgm", "asgd", "fedbuff"]
    gsgm = rows[1]
    assert gsgm["stability-gain"].value == pytest.approx(1 - (0.025 + 0.01 + 0.02) / 3 / 0.1)
    assert gsgm["stability-gain"].distinguishable() is True
    table = markdown_table(rows)
    print(table)  # the example of docs/bench.md
    assert "| ssgd | 0,1,2 | 80.0 ± 0.0 | reference | 5.00 | " in table
    assert "| asgd | 0,1,2 | 90.0 ± 0.0 | +10.0 [+10.0, +10.0] | 10.00 | reference |" in table
    assert "| +0.7 [+0.0, +2.0] not distinguishable | 1.83 | +82% [+73%, +92%] |" in table
    # GSGM reaches 0.8 at 200, 200, 300 (SSGD at 400); in wall time 6, 6, 9 (SSGD 8)
    assert "| 0.58 [0.50, 0.75] | 0.50 | 0.88 |" in table
    assert "| fedbuff | 0,1 | 85.0 ± 0.0 | +5.0 [n/a (1 seed)] |" in table
    assert "| 1.00 [n/a (1 seed)] |" in table
    seeds = per_seed_table(per_run)
    assert "| fedbuff | 85.0 / 7.50 / 1.00× | no grid: re-run | – |" in seeds


def test_write_report_notes_runs_without_a_grid(tmp_path: Path) -> None:
    write_runs(tmp_path, SUITE)
    (tmp_path / "dirichlet" / "notarun").mkdir()
    assert set(load_runs(tmp_path)["dirichlet"]) == set(SUITE)
    paths = write_report(tmp_path, title="test")
    report = (tmp_path / "report.md").read_text()
    assert "- fedbuff seed 1: no grid: re-run" in report and "Per seed" in report
    assert "Virtual-time budget T (SSGD's final virtual time): seed 0: 400" in report
    assert "grid of 4 equally spaced virtual times" in report and "10,000 resamples" in report
    results = json.loads((tmp_path / "results.json").read_text())
    gain = results["dirichlet"]["summary"][1]["stability-gain"]
    assert set(gain) == {"value", "low", "high", "seeds"} and gain["seeds"] == 3
    assert results["dirichlet"]["runs"]["ssgd"]["0"]["grid-source"] == "derived"
    for path in paths:
        assert path.is_file() and path.stat().st_size > 0
    only_old = tmp_path / "old"
    write_runs(only_old, {"asgd": {0: old([0.5])}})
    write_report(only_old)
    assert "| asgd | 0 | no grid: re-run |" in (only_old / "report.md").read_text()
