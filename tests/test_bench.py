"""fl_async.bench without Flower: metrics, statistics and grids on hand-made histories, the
report, resume, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fl_async.bench import metrics, runner, stats
from fl_async.bench.cli import add_arguments
from fl_async.bench.cli import run as cli_run
from fl_async.bench.grid import NO_GRID, derive_grid, grid_note, run_grid
from fl_async.bench.options import build_spec
from fl_async.bench.report import load_runs, run_metrics, split_metrics, write_report
from fl_async.bench.runner import RUN_FILE, SuiteError, SuiteSpec, run_dir
from fl_async.bench.scenarios import SCENARIOS, eval_every, to_run_config_text
from fl_async.bench.schedule import run_suite
from fl_async.bench.summary import summarize
from fl_async.bench.table import markdown_table, per_seed_table
from fl_async.cli import main as fl_async_main
from fl_async.validation import InvalidArgument

T_ODD = 141.12173816854033
"""In floating point T * 15 / 30 > T / 2 and T * 30 / 30 != T: the grid's rounding cases."""

# ----------------------------------------------------------------------------- histories


def _history(evaluations: list, *, steps: int, end: float, staleness: int = 0) -> dict:
    config = {"dataset": "mnist", "partition.scheme": "dirichlet", "clock.speed": "lognormal"}
    updates = [{"staleness": staleness, "accepted": 1}] * 10
    updates += [{"staleness": 9, "accepted": 0}] if staleness else []  # asynchronous: 1 rejected
    return {"config": {**config, "max-virtual-time": 0.0}, "num-nodes": 4, "virtual-time": end,
            "wall-time": 3.0, "server-steps": steps, "stopped-by": "budget",
            "evaluations": evaluations, "grid-evaluations": [], "updates": updates}  # fmt: skip


def ssgd(accuracies: list[float], step: float = 100.0) -> dict:
    """SSGD setting the budget: evaluated at every server step, one step every ``step``."""
    evaluations = [
        {"server-step": i, "accuracy": a, "loss": 1.0, "virtual-time": i * step,
         "wall-time": 2.0 * i, "num-updates": 4 * i}
        for i, a in enumerate(accuracies)
    ]  # fmt: skip
    return _history(evaluations, steps=len(accuracies) - 1, end=(len(accuracies) - 1) * step)


def run(grid: list[float], budget: float = 400.0) -> dict:
    """An asynchronous run with its recorded grid (G = len(grid)); evaluated every 4 steps."""
    points = [
        {"index": i, "virtual-time": budget * i / len(grid), "server-step": 4 * i, "accuracy": a,
         "loss": 1.0, "wall-time": 3.0 * i, "num-updates": 4 * i}
        for i, a in enumerate(grid, start=1)
    ]  # fmt: skip
    evaluations = [{"server-step": 0, "accuracy": 0.1, "virtual-time": 0.0, "wall-time": 0.0}]
    evaluations += [{k: v for k, v in p.items() if k != "index"} for p in points]
    found = _history(evaluations, steps=4 * len(grid), end=budget + 1, staleness=2)
    found["config"].update({"max-virtual-time": budget, "eval-grid": len(grid)})
    found["grid-evaluations"] = points
    return found


def old(grid: list[float]) -> dict:
    """A run made before the evaluation grid: no ``grid-evaluations``, no ``eval-grid``."""
    found = run(grid)
    del found["grid-evaluations"], found["config"]["eval-grid"]
    return found


def write_runs(out: Path, runs: dict) -> None:
    """Each ``strategy -> seed -> history`` of ``runs`` as a finished run of split dirichlet."""
    for strategy, by_seed in runs.items():
        for seed, history in by_seed.items():
            run_dir(out, "dirichlet", strategy, seed).mkdir(parents=True)
            (run_dir(out, "dirichlet", strategy, seed) / "history.json").write_text(
                json.dumps(history)
            )


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
        (0, 0.1, 0.0), (1, 0.5, 2.0), (2, 0.6, 4.0), (3, 0.8, 6.0)]  # fmt: skip
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

SSGD = [0.1, 0.5, 0.6, 0.7, 0.8]  # derived grid of 4 over T = 400: 0.5, 0.6, 0.7, 0.8
SUITE = {
    "ssgd": {s: ssgd(SSGD) for s in (0, 1, 2)},
    "asgd": {0: run([0.6, 0.8, 0.7, 0.9]), 1: run([0.6, 0.8, 0.65, 0.9]),
             2: run([0.6, 0.8, 0.75, 0.9])},
    "gsgm": {0: run([0.6, 0.8, 0.85, 0.8]), 1: run([0.6, 0.8, 0.8, 0.82]),
             2: run([0.7, 0.75, 0.84, 0.8])},
    "fedbuff": {0: run([0.3, 0.5, 0.7, 0.85]), 1: old([0.3, 0.5, 0.7, 0.85])},
}  # fmt: skip


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


# ------------------------------------------------------------------------ runner and resume


def spec(**changes: object) -> SuiteSpec:
    settings = dict(scenario=SCENARIOS["a"], strategies=("asgd", "ssgd"), seeds=(0, 1),
                    dataset="mnist", nodes=4, rounds=2, max_virtual_time=None)  # fmt: skip
    return SuiteSpec(**{**settings, **changes})  # type: ignore[arg-type]


def suite(out: Path, launch: FakeLaunch | None = None, **changes: object) -> runner.SuiteOutcome:
    """``run_suite`` of ``spec(**changes)`` into ``out``, quiet, with a fake launcher."""
    return run_suite(spec(**changes), out, launch=launch or FakeLaunch(), echo=lambda _: None)


class FakeLaunch:
    """Stands in for the launcher: writes a history whose virtual time is known."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.configs: list[dict] = []
        self.fail = fail or set()

    def __call__(self, command: list[str], log: Path) -> int:
        from flwr.common.config import parse_config_args

        config = parse_config_args([command[command.index("--run-config") + 1]])
        self.configs.append(config)
        log.write_text("fake\n")
        if config["strategy"] in self.fail:
            return 1
        record = ssgd([0.1, 0.5, 0.7], step=100 + config["seed"])
        if config.get("eval-grid"):
            record = run([0.5] * config["eval-grid"], budget=config["max-virtual-time"])
        record["config"].update(config)
        Path(config["output-dir"], "history.json").write_text(json.dumps(record))
        return 0

    def stop_all(self) -> None:
        """Nothing to stop: every fake run ends before the call returns."""


def test_run_suite_runs_ssgd_first_and_gives_its_time_as_budget(tmp_path: Path) -> None:
    launch = FakeLaunch()
    outcome = suite(tmp_path, launch)
    assert len(outcome.ran) == 8 and not outcome.failed  # 2 splits x 2 seeds x 2 strategies
    first = launch.configs[:2]
    assert [c["strategy"] for c in first] == ["ssgd", "asgd"]
    assert first[0]["num-rounds"] == 2 and first[0]["max-virtual-time"] == 0.0
    assert first[1]["max-virtual-time"] == 200.0  # the SSGD run's final virtual time
    assert first[1]["eval-every"] == 4 and first[0]["eval-every"] == 1
    # the grid over the budget: recorded by ASGD, derived from SSGD's evaluations by the report
    assert first[1]["eval-grid"] == 40 and "eval-grid" not in first[0]
    assert launch.configs[2]["seed"] == 1 and launch.configs[3]["max-virtual-time"] == 202.0
    assert {c["partition.scheme"] for c in launch.configs} == {"dirichlet", "label_skew"}
    assert (run_dir(tmp_path, "dirichlet", "asgd", 0) / RUN_FILE).is_file()


def test_run_suite_resumes_and_skips_finished_runs(tmp_path: Path) -> None:
    suite(tmp_path, seeds=(0,))
    again = FakeLaunch()
    outcome = suite(tmp_path, again, seeds=(0, 1))
    assert len(outcome.skipped) == 4 and len(outcome.ran) == 4
    assert {c["seed"] for c in again.configs} == {1}
    assert len(json.loads((tmp_path / "suite.json").read_text())["calls"]) == 2
    (run_dir(tmp_path, "dirichlet", "asgd", 1) / "history.json").unlink()  # cut short
    again = FakeLaunch()
    suite(tmp_path, again, seeds=(0, 1))
    assert [(c["strategy"], c["seed"]) for c in again.configs] == [("asgd", 1)]


def test_changed_settings_in_the_same_folder_are_refused(tmp_path: Path) -> None:
    suite(tmp_path, seeds=(0,))
    with pytest.raises(SuiteError, match="num-rounds"):
        suite(tmp_path, seeds=(0,), rounds=3)
    with pytest.raises(SuiteError, match="eval-grid differ"):
        suite(tmp_path, seeds=(0,), grid=20)
    record = run_dir(tmp_path, "dirichlet", "asgd", 0) / RUN_FILE
    made_before = json.loads(record.read_text())
    del made_before["run-config"]["eval-grid"]  # as a run made before the grid
    record.write_text(json.dumps(made_before))
    with pytest.raises(SuiteError, match="made before the evaluation grid .*--report-only"):
        suite(tmp_path, seeds=(0,))


def test_failed_ssgd_blocks_its_seed(tmp_path: Path) -> None:
    outcome = suite(tmp_path, FakeLaunch(fail={"ssgd"}), seeds=(0,))
    assert len(outcome.failed) == 2 and len(outcome.blocked) == 2
    record = json.loads((run_dir(tmp_path, "dirichlet", "ssgd", 0) / RUN_FILE).read_text())
    assert record["exit-code"] == 1


def test_fixed_budget_runs_every_strategy_with_it(tmp_path: Path) -> None:
    launch = FakeLaunch()
    suite(tmp_path, launch, strategies=("gsgm", "fedbuff"), seeds=(3,), max_virtual_time=500.0)
    assert {c["max-virtual-time"] for c in launch.configs} == {500.0}
    assert {c["num-rounds"] for c in launch.configs} == {1_000_000}
    assert {c["eval-grid"] for c in launch.configs} == {40}
    assert {c["strategy"]: c["eval-every"] for c in launch.configs} == {"gsgm": 4, "fedbuff": 1}


def test_planned_runs_eval_every_and_run_config_text() -> None:
    from flwr.common.config import parse_config_args

    runs = runner.planned_runs(spec(seeds=(0,)), Path("out"))
    assert [p.parts[-1] for p in runs][:2] == ["ssgd-seed0", "asgd-seed0"]
    # one evaluation per N updates
    assert eval_every("ssgd", 10) == 1 and eval_every("odsgd", 30) == 1
    assert eval_every("fedbuff", 30) == 3 and eval_every("fedbuff", 30, buffer_size=5) == 6
    assert eval_every("gsgm", 30) == 30
    config = {"strategy": "gsgm", "seed": 1, "clock.sigma": 1.0, "federated-evaluation": False}
    assert parse_config_args([to_run_config_text(config)]) == config


# ------------------------------------------------------------------------------------- CLI


def parse(*argv: str):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "d"], "unknown scenario 'd'; allowed: a, b, c"),
        (["--strategies", "gsgm,fedavg"], "unknown strategy fedavg; allowed: gsgm"),
        (["--seeds", "0,x"], "bad seed 'x'"),
        (["--scenario", "c", "--splits", "label-skew"], "unknown split label-skew; allowed: d"),
        (["--strategies", "gsgm,asgd"], "add 'ssgd' to --strategies"),
        (["--run-config", "seed=3"], "may not set seed"),
        (["--run-config", "eval-grid=3"], "may not set eval-grid: use --strategies"),
        (["--grid", "1"], "--grid must be an integer >= 2, got 1"),
        (["--run-config", "gsgm.nope=3"], "unknown run config key 'gsgm.nope': allowed: gsgm.lr"),
        (["--rounds", "0"], "--rounds must be an integer >= 1, got 0"),
        (["--nodes", "0"], "--nodes must be an integer >= 1, got 0"),
        (["--max-virtual-time", "0"], "--max-virtual-time must be a finite number > 0, got 0.0"),
        (["--data-root", "/no/such/folder"], "--data-root '/no/such/folder' is not a folder"),
        (["--data-root", ".", "--run-config", "data-root='/x'"], "give the data folder once"),
        (["--variant", "gsgm-m0"], "expected NAME=PRESET [KEY=VALUE ...]"),
        (["--variant", "gsgm=gsgm"], "variant name 'gsgm' is a preset's name"),
        (["--variant", "Bad=gsgm"], "bad variant name 'Bad'; allowed: lower-case letters"),
        (["--variant", "x-seed1=gsgm"], "without '-seed'"),
        (["--variant", "x=fedavg"], "unknown preset 'fedavg'; allowed: gsgm"),
        (["--variant", "x=gsgm asgd.lr=0.1"], "asgd.lr would be ignored by 'gsgm'"),
        (["--variant", "x=gsgm seed=2"], "--variant x may not set seed"),
        (["--variant", "x=gsgm", "--variant", "x=asgd"], "the name 'x' is given twice"),
    ],
)
def test_bad_input_exits_2_naming_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    code = fl_async_main(["bench", "--out", str(tmp_path / "suite"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "suite").exists()


def test_build_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = build_spec(parse("--out", "x", "--scenario", "b", "--strategies", "SSGD,gsgm,ssgd"))
    assert built.nodes == 30 and built.strategies == ("ssgd", "gsgm")
    assert built.scenario.splits == ("dirichlet", "label-skew")
    only = build_spec(parse("--out", "x", "--splits", "label-skew", "--grid", "8"))
    assert only.scenario.splits == ("label-skew",) and only.grid == 8 and built.grid == 40
    # --data-root is made absolute
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    built = build_spec(parse("--out", "x", "--data-root", "data"))
    assert built.extra == {"data-root": str(tmp_path / "data")}
    assert built.config("ssgd", "dirichlet", 0, None)["data-root"] == str(tmp_path / "data")


def test_a_variant_runs_its_preset_with_its_overrides_under_its_name(tmp_path: Path) -> None:
    built = build_spec(
        parse("--out", "x", "--strategies", "ssgd,gsgm", "--run-config", "local-epochs=1",
              "--variant", "gsgm-m0=gsgm gsgm.momentum=0.0", "--variant", "asgd-wl=asgd")
    )  # fmt: skip
    assert built.strategies == ("ssgd", "gsgm", "gsgm-m0", "asgd-wl")
    launch = FakeLaunch()
    run_suite(built, tmp_path, launch=launch, echo=lambda _: None)
    by_dir = {Path(c["output-dir"]).name: c for c in launch.configs}
    assert by_dir["gsgm-m0-seed0"]["strategy"] == "gsgm"
    assert by_dir["gsgm-m0-seed0"]["gsgm.momentum"] == 0.0
    assert by_dir["gsgm-m0-seed0"]["local-epochs"] == 1  # the suite's overrides too
    assert "gsgm.momentum" not in by_dir["gsgm-seed0"]
    assert by_dir["asgd-wl-seed0"]["strategy"] == "asgd"
    settings = json.loads((tmp_path / "suite.json").read_text())["latest"]
    assert settings["variants"]["gsgm-m0"] == {
        "preset": "gsgm", "run-config": {"gsgm.momentum": 0.0}
    }  # fmt: skip
    # the report keeps the names, orders a variant after its preset and says what it sets
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    table = report[report.index("| strategy |") :].split("\n\n")[0].splitlines()[2:]
    assert [row.split(" | ")[0] for row in table] == ["| ssgd", "| gsgm", "| gsgm-m0", "| asgd-wl"]
    assert "`gsgm-m0` = gsgm with gsgm.momentum=0.0" in report


def test_a_missing_dataset_stops_the_suite_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["bench", "--out", str(tmp_path / "suite"), "--dataset", "fashion-mnist"]
    assert fl_async_main([*argv, "--data-root", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    # the loader's own message: the folders it searched and how to get the files
    assert "--dataset 'fashion-mnist'" in error and str(tmp_path / "FashionMNIST") in error
    assert not (tmp_path / "suite").exists()


def test_report_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_runs(tmp_path, {"ssgd": {0: ssgd([0.1, 0.5], 10)}})

    def grid_size(*argv: str) -> int:  # G of SSGD's derived grid, after --report-only
        assert cli_run(parse("--out", str(tmp_path), "--report-only", *argv)) == 0
        runs = json.loads((tmp_path / "results.json").read_text())["dirichlet"]["runs"]
        return runs["ssgd"]["0"]["grid-size"]

    assert grid_size() == 40  # no suite.json: the default
    assert "| ssgd | 0 |" in (tmp_path / "report.md").read_text()
    latest = {"latest": spec(scenario=SCENARIOS["b"], nodes=30, grid=5).as_json()}
    (tmp_path / "suite.json").write_text(json.dumps(latest))
    assert grid_size() == 5 and grid_size("--grid", "3") == 3  # the suite's, or --grid
    assert "scenario b (30 nodes" in (tmp_path / "report.md").read_text()
    assert cli_run(parse("--out", str(tmp_path / "missing"), "--report-only")) == 2
