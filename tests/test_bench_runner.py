"""fl_async.bench without Flower: ``run_suite`` with a fake launcher (order, budget, resume,
changed settings, failures) and the ``fl-async bench`` command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import FakeLaunch, parse, spec, ssgd, write_finished, write_runs

from fl_async.app.run_status import FAILED, RUN_STATUS, ended, write_run_status
from fl_async.bench import runner
from fl_async.bench.cli import run as cli_run
from fl_async.bench.options import build_spec
from fl_async.bench.report import write_report
from fl_async.bench.runner import RUN_FILE, SuiteError, run_dir
from fl_async.bench.scenarios import SCENARIOS, eval_every, to_run_config_text
from fl_async.bench.schedule import run_suite
from fl_async.cli import main as fl_async_main

# ------------------------------------------------------------------------ runner and resume


def suite(out: Path, launch: FakeLaunch | None = None, **changes: object) -> runner.SuiteOutcome:
    """``run_suite`` of ``spec(**changes)`` into ``out``, quiet, with a fake launcher."""
    return run_suite(spec(**changes), out, launch=launch or FakeLaunch(), echo=lambda _: None)


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


class NoStatus(FakeLaunch):
    """Exits 0 and leaves a history, but ASGD's runs a run status that is no success: none at
    all on seed 0 (a run that crashed after its history), a failed one on seed 1."""

    def __call__(self, command: list[str], log: Path) -> int:
        super().__call__(command, log)
        config = self.configs[-1]
        if config["strategy"] == "asgd":
            output = Path(config["output-dir"])
            (output / RUN_STATUS).unlink()
            if config["seed"] == 1:
                write_run_status(output, ended(FAILED, "RuntimeError: after the history"))
        return 0


def test_a_run_counts_as_made_by_its_status_not_its_exit_code(tmp_path: Path) -> None:
    outcome = suite(tmp_path, NoStatus(), seeds=(0, 1))
    asgd = [
        run_dir(tmp_path, s, "asgd", seed) for s in ("dirichlet", "label-skew") for seed in (0, 1)
    ]
    assert sorted(outcome.failed) == sorted(asgd) and len(outcome.ran) == 4
    record = json.loads((asgd[0] / RUN_FILE).read_text())
    assert record["exit-code"] == 1  # the launcher said 0


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
        parse(
            "--out",
            "x",
            "--strategies",
            "ssgd,gsgm",
            "--run-config",
            "local-epochs=1",
            "--variant",
            "gsgm-m0=gsgm gsgm.momentum=0.0",
            "--variant",
            "asgd-wl=asgd",
        )
    )
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
        "preset": "gsgm",
        "run-config": {"gsgm.momentum": 0.0},
    }
    # the report keeps the names, orders a variant after its preset and says what it sets
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    table = report[report.index("| strategy |") :].split("\n\n")[0].splitlines()[2:]
    assert [row.split(" | ")[0] for row in table] == ["| ssgd", "| gsgm", "| gsgm-m0", "| asgd-wl"]
    assert "`gsgm-m0` = gsgm with gsgm.momentum=0.0" in report


def test_a_variant_back_at_a_default_is_described_against_its_presets_own_run(
    tmp_path: Path,
) -> None:
    # the claims study gives FedBuff the sweep's rate for the suite and runs the default beside
    built = build_spec(
        parse(
            "--out",
            "x",
            "--strategies",
            "ssgd,fedbuff",
            "--run-config",
            "fedbuff.lr=2.0",
            "--variant",
            "fedbuff-default=fedbuff fedbuff.lr=1.0",
        )
    )
    run_suite(built, tmp_path, launch=FakeLaunch(), echo=lambda _: None)
    write_report(tmp_path)
    assert "`fedbuff-default` = fedbuff with fedbuff.lr=1.0" in (tmp_path / "report.md").read_text()


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


class EndsByItsRule(FakeLaunch):
    """ASGD's runs exit 1 after writing a history stopped by ``no-active-nodes``; on seed 1 with a
    fault recorded too (the machine's doing: a failed run)."""

    def __call__(self, command: list[str], log: Path) -> int:
        status = super().__call__(command, log)
        config = self.configs[-1]
        if config["strategy"] != "asgd":
            return status
        history = json.loads(Path(config["output-dir"], "history.json").read_text())
        history["stopped-by"] = "no-active-nodes"
        history["faults"] = {"timeout": 3} if config["seed"] == 1 else {}
        write_finished(config["output-dir"], history)
        return 1


def test_a_run_ended_by_its_own_rule_is_finished_and_says_so(tmp_path: Path) -> None:
    """The app exits 1 when every node left; its history is the run's end, not a failure. With a
    fault recorded, the same stop is a failed run."""
    lines: list[str] = []
    outcome = run_suite(spec(), tmp_path, launch=EndsByItsRule(), echo=lines.append)
    splits = ("dirichlet", "label-skew")
    assert sorted(outcome.failed) == sorted(run_dir(tmp_path, s, "asgd", 1) for s in splits)
    assert len(outcome.ran) == 6 and all(
        run_dir(tmp_path, s, "asgd", 0) in outcome.ran for s in splits
    )
    ended = [line for line in lines if "ended by its own rule" in line]
    assert len(ended) == 2 and all("(no-active-nodes) in 0 s: " in line for line in ended)
    assert "dirichlet seed 0 asgd, final accuracy 50.0%" in ended[0]
    assert sum("failed (exit 1)" in line for line in lines) == 2


def test_scenario_s_is_synthetic_by_device_with_fixed_local_steps() -> None:
    spec = build_spec(parse("--scenario", "s", "--strategies", "ssgd,asgd", "--nodes", "100"))
    config = spec.config("asgd", "natural", 30, budget=50.0)
    assert (spec.dataset, spec.nodes, spec.scenario.splits) == ("synthetic", 100, ("natural",))
    assert config["partition.scheme"] == "natural" and config["local-steps"] == 20
    mnist = build_spec(parse("--scenario", "a", "--strategies", "ssgd"))
    assert mnist.dataset == "mnist" and "local-steps" not in mnist.config(
        "ssgd", "dirichlet", 0, None
    )
    overridden = build_spec(parse("--scenario", "s", "--run-config", "local-steps=5"))
    assert overridden.config("ssgd", "natural", 0, None)["local-steps"] == 5
