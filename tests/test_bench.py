"""fl_async.bench without Flower: metrics on hand-made histories, the report, resume, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_async.bench import metrics
from fl_async.bench.cli import add_arguments, build_spec
from fl_async.bench.cli import run as cli_run
from fl_async.bench.report import (
    load_runs,
    markdown_table,
    per_seed_table,
    run_metrics,
    summarize,
    write_report,
)
from fl_async.bench.runner import (
    RUN_FILE,
    SuiteError,
    SuiteSpec,
    planned_runs,
    run_dir,
    run_suite,
)
from fl_async.bench.scenarios import SCENARIOS, eval_every, to_run_config_text
from fl_async.cli import main as fl_async_main

# ------------------------------------------------------------------------------------ metrics


def test_sigma_acc_uses_the_second_half_of_virtual_time() -> None:
    times = [0, 10, 20, 30, 40, 50, 60]
    accuracies = [0.1, 0.5, 0.7, 0.8, 0.9, 0.8, 0.9]
    # final time 60: evaluations at t >= 30 -> 0.8, 0.9, 0.8, 0.9 -> std 0.05
    assert metrics.sigma_acc(times, accuracies) == pytest.approx(0.05)
    # a later final time (the budget) moves the window
    assert metrics.sigma_acc(times, accuracies, final_time=100) == pytest.approx(0.05)
    assert metrics.sigma_acc(times, accuracies, final_time=120) == pytest.approx(0.0)
    assert metrics.sigma_acc([], []) is None


def test_mean_abs_change_over_the_same_window() -> None:
    times = [0, 10, 20, 30, 40]
    accuracies = [0.1, 0.9, 0.5, 0.7, 0.4]
    # window t >= 20: 0.5, 0.7, 0.4 -> changes 0.2, 0.3
    assert metrics.mean_abs_change(times, accuracies) == pytest.approx(0.25)
    assert metrics.mean_abs_change([0, 10], [0.1, 0.2]) is None  # one evaluation in the window


def test_time_to_accuracy_is_the_first_time_reached() -> None:
    times = [0.0, 5.0, 9.0, 12.0]
    accuracies = [0.1, 0.6, 0.59, 0.8]
    assert metrics.time_to_accuracy(times, accuracies, 0.6) == 5.0
    assert metrics.time_to_accuracy(times, accuracies, 0.7) == 12.0
    assert metrics.time_to_accuracy(times, accuracies, 0.9) is None


def test_converged_compares_the_last_five_with_ssgd() -> None:
    ssgd = [0.1, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert metrics.converged([0.0, 0.9, 0.9, 0.9, 0.9, 0.9], ssgd) is True
    assert metrics.converged([0.9, 0.89, 0.89, 0.89, 0.89, 0.89], ssgd) is False
    assert metrics.converged([0.95, 0.95], [1.0]) is True  # fewer than five: all of them
    assert metrics.converged([], ssgd) is None


def test_stability_gain() -> None:
    assert metrics.stability_gain(0.8, 1.0) == pytest.approx(0.2)
    assert metrics.stability_gain(1.5, 1.0) == pytest.approx(-0.5)
    assert metrics.stability_gain(0.5, 0.0) is None
    assert metrics.stability_gain(None, 1.0) is None


def test_staleness_and_update_counts() -> None:
    updates = [
        {"staleness": 0, "accepted": 1},
        {"staleness": 3, "accepted": 1},
        {"staleness": 5, "accepted": 0},
    ]
    assert metrics.staleness_stats(updates) == (pytest.approx(8 / 3), 5)
    assert metrics.update_counts(updates) == (2, 1)
    assert metrics.staleness_stats([]) == (None, None)


# ------------------------------------------------------------------------------ histories


def history(
    accuracies: list[float], step_time: float, staleness: int = 0, rejected: int = 0
) -> dict:
    """A minimal history.json: evaluations every ``step_time`` virtual seconds."""
    evaluations = [
        {"server-step": i, "accuracy": a, "virtual-time": i * step_time, "loss": 1.0}
        for i, a in enumerate(accuracies)
    ]
    updates = [{"staleness": staleness, "accepted": 1} for _ in range(10)]
    updates += [{"staleness": staleness + 9, "accepted": 0} for _ in range(rejected)]
    return {
        "config": {"dataset": "mnist", "partition.scheme": "dirichlet", "clock.speed": "lognormal"},
        "num-nodes": 4,
        "virtual-time": (len(accuracies) - 1) * step_time,
        "wall-time": 3.0,
        "server-steps": len(accuracies),
        "stopped-by": "budget",
        "evaluations": evaluations,
        "updates": updates,
    }


def test_run_metrics_relative_to_ssgd() -> None:
    ssgd = history([0.1, 0.4, 0.6, 0.7, 0.8], step_time=100)
    fast = history([0.1, 0.7, 0.8, 0.85, 0.82], step_time=100, staleness=2, rejected=1)
    found = run_metrics(fast, ssgd)
    assert found["target-accuracy"] == 0.8
    assert found["time-to-target"] == 200
    assert found["baseline-time-to-target"] == 400
    assert found["time-ratio"] == pytest.approx(0.5)
    assert found["time-ratio-90"] == pytest.approx(0.5)  # 0.72: at 200, SSGD at 400
    assert found["converged"] is True
    assert (found["applied"], found["rejected"]) == (10, 1)
    assert found["max-staleness"] == 11
    assert run_metrics(ssgd, ssgd)["time-ratio"] == 1.0


def test_summary_and_table() -> None:
    ssgd = {0: run_metrics(history([0.1, 0.5, 0.8], 100), history([0.1, 0.5, 0.8], 100))}
    base = history([0.1, 0.5, 0.8], 100)
    asgd = {
        0: run_metrics(history([0.1, 0.6, 0.7, 0.9, 0.7], 50), base),
        1: run_metrics(history([0.1, 0.6, 0.7, 0.9, 0.7], 50), base),
    }
    gsgm = {0: run_metrics(history([0.1, 0.6, 0.8, 0.85, 0.8], 50), base)}
    rows = summarize({"gsgm": gsgm, "asgd": asgd, "ssgd": ssgd})
    assert [r["strategy"] for r in rows] == ["ssgd", "gsgm", "asgd"]
    by_name = {r["strategy"]: r for r in rows}
    assert by_name["asgd"]["stability-gain"] == pytest.approx(0.0)
    sigma_asgd = metrics.sigma_acc([0, 50, 100, 150, 200], [0.1, 0.6, 0.7, 0.9, 0.7])
    sigma_gsgm = metrics.sigma_acc([0, 50, 100, 150, 200], [0.1, 0.6, 0.8, 0.85, 0.8])
    assert by_name["gsgm"]["stability-gain"] == pytest.approx(1 - sigma_gsgm / sigma_asgd)
    assert by_name["asgd"]["seeds"] == [0, 1]
    table = markdown_table(rows)
    assert table.count("\n") == 4  # header, rule, three rows
    assert "| gsgm | 0 | 80.0 ± 0.0 |" in table
    # asgd first reaches SSGD's final 0.8 at 150 (SSGD at 200), though it ends at 0.7
    assert "| asgd | 0,1 | 70.0 ± 0.0 | 9.43 | +0% | 20.00 | 0.75 | 0.75 | 2/2 |" in table
    seeds = per_seed_table({"gsgm": gsgm, "asgd": asgd, "ssgd": ssgd})
    assert seeds.splitlines()[0] == "| strategy | seed 0 | seed 1 |"
    assert "| ssgd | 80.0 / 15.00 / 1.00× | – |" in seeds
    assert "| asgd | 70.0 / 9.43 / 0.75× | 70.0 / 9.43 / 0.75× |" in seeds
    slow = {"fedbuff": {3: run_metrics(history([0.1, 0.2], 100), base)}}
    assert "| fedbuff | 20.0 / 0.00 / not reached |" in per_seed_table(slow)
    no_baseline = {"asp": {3: run_metrics(history([0.1, 0.2], 100))}}
    assert "| asp | 20.0 / 0.00 / – |" in per_seed_table(no_baseline)
    # the gain pairs seeds: ASGD's seed 1 is left out of GSGM's comparison (here equal anyway)
    unpaired = summarize({"gsgm": gsgm, "asgd": {1: asgd[1]}})
    assert unpaired[0]["stability-gain"] is None
    slow = {0: run_metrics(history([0.1, 0.2, 0.3], 100), base)}
    assert "not reached (0/1) | not reached (0/1) | 0/1 |" in markdown_table(
        summarize({"fedbuff": slow})
    )


def test_write_report_and_load_runs(tmp_path: Path) -> None:
    for strategy, accuracies in (("ssgd", [0.1, 0.5, 0.8]), ("gsgm", [0.1, 0.8, 0.85])):
        directory = run_dir(tmp_path, "dirichlet", strategy, 0)
        directory.mkdir(parents=True)
        (directory / "history.json").write_text(json.dumps(history(accuracies, 100)))
    (tmp_path / "dirichlet" / "notarun").mkdir()
    runs = load_runs(tmp_path)
    assert set(runs["dirichlet"]) == {"ssgd", "gsgm"}
    paths = write_report(tmp_path, title="test")
    report = (tmp_path / "report.md").read_text()
    assert "## dirichlet" in report and "| gsgm | 0 |" in report
    assert "Per seed" not in report  # one seed: the table above already is per seed
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["dirichlet"]["runs"]["gsgm"]["0"]["time-ratio"] == pytest.approx(0.5)
    for path in paths:
        assert path.is_file() and path.stat().st_size > 0


# ------------------------------------------------------------------------ runner and resume


def spec(**changes: object) -> SuiteSpec:
    settings: dict = {
        "scenario": SCENARIOS["a"],
        "strategies": ("asgd", "ssgd"),
        "seeds": (0, 1),
        "dataset": "mnist",
        "nodes": 4,
        "rounds": 2,
        "max_virtual_time": None,
    }
    settings.update(changes)
    return SuiteSpec(**settings)


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
        record = history([0.1, 0.5, 0.7], step_time=100 + config["seed"])
        record["config"].update(config)
        Path(config["output-dir"], "history.json").write_text(json.dumps(record))
        return 0


def test_run_suite_runs_ssgd_first_and_gives_its_time_as_budget(tmp_path: Path) -> None:
    launch = FakeLaunch()
    outcome = run_suite(spec(), tmp_path, launch=launch, echo=lambda _: None)
    assert len(outcome.ran) == 8 and not outcome.failed  # 2 splits x 2 seeds x 2 strategies
    first = launch.configs[:2]
    assert [c["strategy"] for c in first] == ["ssgd", "asgd"]
    assert first[0]["num-rounds"] == 2 and first[0]["max-virtual-time"] == 0.0
    assert first[1]["max-virtual-time"] == 200.0  # the SSGD run's final virtual time
    assert first[1]["eval-every"] == 4 and first[0]["eval-every"] == 1
    assert launch.configs[2]["seed"] == 1 and launch.configs[3]["max-virtual-time"] == 202.0
    assert {c["partition.scheme"] for c in launch.configs} == {"dirichlet", "label_skew"}
    assert (run_dir(tmp_path, "dirichlet", "asgd", 0) / RUN_FILE).is_file()


def test_run_suite_resumes_and_skips_finished_runs(tmp_path: Path) -> None:
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lambda _: None)
    again = FakeLaunch()
    outcome = run_suite(spec(seeds=(0, 1)), tmp_path, launch=again, echo=lambda _: None)
    assert len(outcome.skipped) == 4 and len(outcome.ran) == 4
    assert {c["seed"] for c in again.configs} == {1}
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert len(suite["calls"]) == 2


def test_a_half_finished_run_is_run_again(tmp_path: Path) -> None:
    directory = run_dir(tmp_path, "dirichlet", "ssgd", 0)
    directory.mkdir(parents=True)
    (directory / "run.log").write_text("interrupted\n")  # no history.json
    launch = FakeLaunch()
    run_suite(spec(seeds=(0,)), tmp_path, launch=launch, echo=lambda _: None)
    assert launch.configs[0]["strategy"] == "ssgd" and launch.configs[0]["seed"] == 0


def test_changed_settings_in_the_same_folder_are_refused(tmp_path: Path) -> None:
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lambda _: None)
    with pytest.raises(SuiteError, match="num-rounds"):
        run_suite(spec(seeds=(0,), rounds=3), tmp_path, launch=FakeLaunch(), echo=lambda _: None)


def test_failed_ssgd_blocks_its_seed(tmp_path: Path) -> None:
    outcome = run_suite(
        spec(seeds=(0,)), tmp_path, launch=FakeLaunch(fail={"ssgd"}), echo=lambda _: None
    )
    assert len(outcome.failed) == 2 and len(outcome.blocked) == 2
    assert (
        json.loads((run_dir(tmp_path, "dirichlet", "ssgd", 0) / RUN_FILE).read_text())["exit-code"]
        == 1
    )


def test_fixed_budget_runs_every_strategy_with_it(tmp_path: Path) -> None:
    launch = FakeLaunch()
    run_suite(
        spec(strategies=("gsgm", "fedbuff"), seeds=(3,), max_virtual_time=500.0),
        tmp_path,
        launch=launch,
        echo=lambda _: None,
    )
    assert {c["max-virtual-time"] for c in launch.configs} == {500.0}
    assert {c["num-rounds"] for c in launch.configs} == {1_000_000}
    assert {c["strategy"]: c["eval-every"] for c in launch.configs} == {"gsgm": 4, "fedbuff": 1}


def test_planned_runs_order() -> None:
    runs = planned_runs(spec(seeds=(0,)), Path("out"))
    assert [p.parts[-2:] for p in runs][:2] == [
        ("dirichlet", "ssgd-seed0"),
        ("dirichlet", "asgd-seed0"),
    ]


def test_eval_every_gives_one_evaluation_per_cycle() -> None:
    assert eval_every("ssgd", 10) == 1 and eval_every("odsgd", 30) == 1
    assert eval_every("fedbuff", 30) == 3 and eval_every("fedbuff", 30, buffer_size=5) == 6
    assert eval_every("gsgm", 30) == 30


def test_run_config_text_round_trips() -> None:
    from flwr.common.config import parse_config_args

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
        (
            ["--scenario", "c", "--splits", "label-skew"],
            "unknown split label-skew; allowed: dirichlet",
        ),
        (["--strategies", "gsgm,asgd"], "add 'ssgd' to --strategies"),
        (["--run-config", "seed=3"], "may not set seed"),
        (["--run-config", "gsgm.nope=3"], "unknown run config key 'gsgm.nope': allowed: gsgm.lr"),
        (["--rounds", "0"], "--rounds must be an integer >= 1, got 0"),
        (["--nodes", "0"], "--nodes must be an integer >= 1, got 0"),
        (["--max-virtual-time", "0"], "--max-virtual-time must be a finite number > 0, got 0.0"),
        (["--data-root", "/no/such/folder"], "--data-root '/no/such/folder' is not a folder"),
        (["--data-root", ".", "--run-config", "data-root='/x'"], "give the data folder once"),
    ],
)
def test_bad_input_exits_2_naming_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    code = fl_async_main(["bench", "--out", str(tmp_path / "suite"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "suite").exists()


def test_build_spec_defaults() -> None:
    built = build_spec(parse("--out", "x", "--scenario", "b", "--strategies", "SSGD,gsgm,ssgd"))
    assert built.nodes == 30 and built.strategies == ("ssgd", "gsgm")
    assert built.scenario.splits == ("dirichlet", "label-skew")
    assert build_spec(parse("--out", "x", "--splits", "label-skew")).scenario.splits == (
        "label-skew",
    )


def test_data_root_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    built = build_spec(parse("--out", "x", "--data-root", "data"))
    assert built.extra == {"data-root": str(tmp_path / "data")}
    assert built.config("ssgd", "dirichlet", 0, None)["data-root"] == str(tmp_path / "data")


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
    directory = run_dir(tmp_path, "dirichlet", "ssgd", 0)
    directory.mkdir(parents=True)
    (directory / "history.json").write_text(json.dumps(history([0.1, 0.5], 10)))
    assert cli_run(parse("--out", str(tmp_path), "--report-only")) == 0
    assert "| ssgd | 0 |" in (tmp_path / "report.md").read_text()
    suite = {"latest": spec(scenario=SCENARIOS["b"], nodes=30).as_json()}
    (tmp_path / "suite.json").write_text(json.dumps(suite))
    assert cli_run(parse("--out", str(tmp_path), "--report-only")) == 0
    assert "scenario b (30 nodes" in (tmp_path / "report.md").read_text()
    assert cli_run(parse("--out", str(tmp_path / "missing"), "--report-only")) == 2
