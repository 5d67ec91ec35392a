"""fl_async.bench's sweeps, tuned settings, --jobs and progress, with fake runs (no Flower)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import benchmark_modules  # noqa: F401 (benchmarks/blocks.py, imported as the scripts do)
import blocks
import pytest
from bench_fakes import FakeLaunch, parse, pop_provenance, run, spec, write_finished

from fl_async.bench.commands import write_choice
from fl_async.bench.export import export_suite
from fl_async.bench.options import build_spec, build_sweep
from fl_async.bench.progress import Progress, RunLabel, estimate_left, format_duration
from fl_async.bench.records import load_records
from fl_async.bench.runner import run_dir
from fl_async.bench.scenarios import STRATEGIES
from fl_async.bench.schedule import run_suite
from fl_async.bench.sweep import GridError, check_strategies, load_grid, point_name
from fl_async.bench.tuning import PointScore, choose, load_tuned
from fl_async.cli import main as fl_async_main
from fl_async.validation import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
PRESETS_GRID = ROOT / "benchmarks" / "sweeps" / "presets.toml"
TWELVE = (
    *("gsgm", "asgd", "trendsmooth", "fedasync", "fedbuff", "dcasgd", "ssgd", "odsgd", "asp"),
    *("mifa", "ca2fl", "fadas"),
)

CHANGED = {"dcasgd": "-lrauto", "fedbuff": "-lr1.0", "trendsmooth": "-lrauto"}
"""The presets whose default rate the claims study changed after the committed sweep ran: the
name their default of then now has."""


def grid_file(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


TWO = """
tie-margin = 1.0
[grid.ssgd]
lr = [1.0, 0.5]
[grid.asgd]
lr = ["auto", 0.05]
"""


# ------------------------------------------------------------------------------ grid files


def test_a_grid_file_gives_each_strategy_its_points_named_after_their_values(
    tmp_path: Path,
) -> None:
    grid = load_grid(grid_file(tmp_path, TWO))
    assert grid.size() == 2 and grid.tie_margin == 1.0
    assert grid.points("asgd") == [{"asgd.lr": "auto"}, {"asgd.lr": 0.05}]
    # the point at the preset's defaults is the preset itself
    assert [point_name("asgd", p) for p in grid.points("asgd")] == ["asgd", "asgd-lr0.05"]
    assert point_name("ssgd", {"ssgd.lr": 1}) == "ssgd"  # 1 is 1.0
    assert point_name("gsgm", {"gsgm.lr": 0.01, "gsgm.momentum": 0.8}) == (
        "gsgm-lr0.01-momentum0.8"
    )
    json_grid = grid_file(tmp_path, json.dumps({"grid": {"asgd": {"lr": [0.1]}}}), "g.json")
    assert load_grid(json_grid).points("asgd") == [{"asgd.lr": 0.1}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[grid.asgd]\nlr = [0.1, 0.2]\n[grid.gsgm]\nlr = [0.1]\nmomentum = [0.8, 0.9]\n"
         "[grid.ssgd]\nlr = [1.0]\n",
         "every strategy must get a grid of the same size, got asgd 2, gsgm 2, ssgd 1 points"),
        ("[grid.asgd]\nnope = [1]\n", "[grid.asgd]: unknown hyperparameter 'nope'; allowed: lr"),
        ("[grid.asgd]\nlr = []\n", "lr must be a non-empty list"),
        ("[grid.asgd]\nlr = [0.1, 0.1]\n", "lists a value twice"),
        ("[grid.asgd]\nlr = ['fast']\n",
         "[grid.asgd]: run config 'asgd.lr' must be a number, 'auto' or 'default', got 'fast'"),
        ("[grid]\n", "no [grid.<strategy>] table"),
        ("rule = 1\n[grid.asgd]\nlr = [0.1]\n", "unknown keys rule"),
        ("tie-margin = -1\n[grid.asgd]\nlr = [0.1]\n", "tie-margin must be a number"),
        ("[grid.asgd\n", "cannot read it"),
    ],
)  # fmt: skip
def test_bad_grid_files_are_refused_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(GridError) as error:
        load_grid(grid_file(tmp_path, text))
    assert message in str(error.value)


def test_strategies_this_fl_async_lacks_are_named_at_run_time(tmp_path: Path) -> None:
    path = grid_file(tmp_path, "[grid.asgd]\nlr = [0.1]\n[grid.newrule]\nlr = [0.1]\n")
    grid = load_grid(path)  # its keys are unchecked: the preset is not here
    with pytest.raises(GridError, match="sweeps newrule, which this fl-async has no preset for"):
        check_strategies(grid, None)
    assert check_strategies(grid, ("asgd",)) == ("asgd",)  # the others can be swept
    with pytest.raises(GridError, match="--strategies gsgm not in"):
        check_strategies(grid, ("gsgm",))


def test_the_committed_presets_grid_gives_every_preset_the_same_size() -> None:
    grid = load_grid(PRESETS_GRID)
    assert len(grid.grid) == 12 and grid.size() == 4
    here = tuple(name for name in grid.grid if name in STRATEGIES)
    assert check_strategies(grid, here) == here and sorted(here) == sorted(TWELVE)
    for strategy in TWELVE:  # the default of the sweep's time is a point: tuned beside it
        assert f"{strategy}{CHANGED.get(strategy, '')}" in names_of(grid, strategy), strategy
    # the three the claims study changed: the new default is a point too (trendsmooth's
    # "default" is lr 0.2 with its sgd base, a number in the grid)
    assert "dcasgd" in names_of(grid, "dcasgd") and "fedbuff" in names_of(grid, "fedbuff")
    assert "trendsmooth-lr0.2" in names_of(grid, "trendsmooth")
    assert point_name("trendsmooth", {"trendsmooth.lr": "default"}) == "trendsmooth"


def names_of(grid, strategy: str) -> list[str]:
    return [point_name(strategy, p) for p in grid.points(strategy)]


# ------------------------------------------------------------------------------ selection


def score(name: str, finals: list[float], sigmas: list[float], missing: int = 0) -> PointScore:
    return PointScore(name, {}, tuple(finals), tuple(sigmas), ("x",) * missing)


def test_the_best_mean_final_accuracy_wins_and_a_tie_goes_to_the_steadier() -> None:
    points = [
        score("a", [0.91, 0.92], [0.030, 0.030]),
        score("b", [0.91, 0.912], [0.010, 0.012]),  # 0.4 points below a: tied within 0.5
        score("c", [0.95, 0.99], [0.001, 0.001], missing=1),  # a run missing: no part
        score("d", [0.80, 0.80], [0.0, 0.0]),
    ]
    assert choose(points, tie_margin=0.5).name == "b"
    assert choose(points, tie_margin=0.0).name == "a"
    assert choose(points[2:3], tie_margin=0.5) is None
    equal = [score("first", [0.9], [0.01]), score("second", [0.9], [0.01])]
    assert choose(equal, tie_margin=0.0).name == "first"  # then the grid file's order


class SweepLaunch(FakeLaunch):
    """A fake run whose final accuracy depends on its server rate: lr 0.05 ends at 0.9 but
    swings; 'auto' ends at 0.897, steadily; SSGD's lr 0.5 fails."""

    def __call__(self, command: list[str], log: Path) -> int:
        from flwr.common.config import parse_config_args

        config = parse_config_args([command[command.index("--run-config") + 1]])
        if config.get("ssgd.lr") == 0.5:
            self.configs.append(config)
            return 1
        if config.get("eval-grid") and config["strategy"] == "asgd":
            self.configs.append(config)
            steady = config.get("asgd.lr", "auto") == "auto"
            grid = [0.897] * 4 if steady else [0.7, 0.95, 0.7, 0.9]
            record = run(grid, budget=config["max-virtual-time"])
            record["config"].update(config)
            write_finished(config["output-dir"], record)
            return 0
        return super().__call__(command, log)


def test_a_sweep_runs_every_point_and_writes_the_choice_that_tuned_runs_again(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = grid_file(tmp_path, TWO)
    out = tmp_path / "sweep"
    args = parse("--sweep", str(path), "--out", str(out), "--nodes", "4", "--rounds", "2",
                 "--seeds", "0,1", "--splits", "dirichlet", "--grid", "4")  # fmt: skip
    built = build_spec(args)
    assert built.strategies == ("ssgd", "ssgd-lr0.5", "asgd", "asgd-lr0.05")
    assert built.variants["asgd-lr0.05"].overrides == {"asgd.lr": 0.05}
    launch = SweepLaunch()
    outcome = run_suite(built, out, launch=launch, jobs=2, echo=lambda _: None)
    assert len(outcome.ran) == 6 and len(outcome.failed) == 2
    capsys.readouterr()
    assert write_choice(out, *build_sweep(args), None) == 0  # each strategy got a choice
    printed = capsys.readouterr().out
    assert "sweep: asgd: asgd (asgd.lr=auto), final accuracy 89.7%" in printed
    assert "sweep: ssgd: ssgd (ssgd.lr=1.0), final accuracy" in printed
    tuned = json.loads((out / "tuned.json").read_text())
    # 0.05 ends 0.3 points higher, within the margin of 1 point, and 'auto' is steadier
    assert tuned["chosen"]["asgd"]["name"] == "asgd" and tuned["tie-margin"] == 1.0
    assert [p["final-accuracy"] for p in tuned["points"]["asgd"]] == [0.897, 0.9]
    assert tuned["points"]["ssgd"][1]["missing"] == [
        "dirichlet seed 0: no run", "dirichlet seed 1: no run"]  # fmt: skip
    assert tuned["settings"]["nodes"] == 4 and "sigma_acc" in tuned["rule"]
    assert load_tuned(out / "tuned.json") == {"asgd": {"asgd.lr": "auto"}, "ssgd": {"ssgd.lr": 1.0}}
    # a later suite runs each strategy's chosen settings beside its defaults
    later = build_spec(parse("--out", "x", "--strategies", "ssgd,asgd,gsgm",
                             "--tuned", str(out / "tuned.json")))  # fmt: skip
    assert later.strategies == ("ssgd", "asgd", "gsgm", "ssgd-tuned", "asgd-tuned")
    assert later.config("asgd-tuned", "dirichlet", 0, 10.0)["asgd.lr"] == "auto"
    # the generated table of the sweep (benchmarks/blocks.py), from its records folder and the
    # choice made there
    export_suite(out, tmp_path / "records")
    assert write_choice(tmp_path / "records", *build_sweep(args), None) == 0
    page = "<!-- generated tuned from records -->\n<!-- end generated -->\n"
    table, _, changed = blocks.generate(page, tmp_path)
    assert len(changed) == 1
    assert "| asgd | 89.7% | " in table and "| asgd (asgd.lr = auto) | 89.7% |" in table
    assert "| ssgd | " in table and table.count("| no |") == 2 and "tie-margin 1.0" in table
    assert blocks.generate(table, tmp_path)[2] == []  # made again: unchanged


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variant", "x=asgd"], "--sweep runs its grid's points: leave out --variant"),
        (["--strategies", "gsgm"], "--strategies gsgm not in"),
        (["--export", "y"], "--export takes no --sweep"),
        (["--jobs", "0"], "--jobs must be an integer >= 1, got 0"),
        (["--run-timeout", "0"], "--run-timeout must be a finite number > 0"),
    ],
)
def test_bad_sweep_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    path = grid_file(tmp_path, TWO)
    code = fl_async_main(["bench", "--sweep", str(path), "--out", str(tmp_path / "s"), *argv])
    assert code == 2 and message in capsys.readouterr().err


def test_tuned_refuses_what_is_not_a_tuned_record(tmp_path: Path) -> None:
    bad = grid_file(tmp_path, json.dumps({"format": "x"}), "t.json")
    with pytest.raises(InvalidArgument, match="is not a tuned record"):
        load_tuned(bad)
    foreign = {
        "format": "fl-async-bench-tuned/1",
        "chosen": {"asgd": {"run-config": {"gsgm.lr": 1}}},
    }
    with pytest.raises(InvalidArgument, match="is not a setting of a preset"):
        load_tuned(grid_file(tmp_path, json.dumps(foreign), "f.json"))
    tuned = {"format": "fl-async-bench-tuned/1", "chosen": {"asgd": {"run-config": {}}}}
    path = grid_file(tmp_path, json.dumps(tuned), "g.json")
    with pytest.raises(InvalidArgument, match="none of --strategies ssgd, gsgm"):
        build_spec(parse("--out", "x", "--strategies", "ssgd,gsgm", "--tuned", str(path)))


# ----------------------------------------------------------------------------------- --jobs


class SlowLaunch(FakeLaunch):
    """A fake run that counts how many go at once; with ``together``, the first waits (5 s at
    most) until a second one goes, so that runs overlap however loaded the machine is."""

    def __init__(self, fail: set[str] | None = None, together: bool = False) -> None:
        super().__init__(fail)
        self.going = self.most = 0
        self.lock = threading.Lock()
        self.overlap = threading.Event()
        self.together = together

    def __call__(self, command: list[str], log: Path) -> int:
        with self.lock:
            self.going += 1
            self.most = max(self.most, self.going)
            if self.going > 1:
                self.overlap.set()
        if self.together:
            self.overlap.wait(timeout=5.0)
        try:
            return super().__call__(command, log)
        finally:
            with self.lock:
                self.going -= 1


def test_jobs_give_the_records_of_a_sequential_suite(tmp_path: Path) -> None:
    settings = {"strategies": ("ssgd", "asgd", "gsgm"), "seeds": (0, 1, 2)}
    exported = {}
    for jobs in (1, 3):
        launch = SlowLaunch(together=jobs > 1)
        out = tmp_path / f"jobs{jobs}"
        outcome = run_suite(spec(**settings), out, launch=launch, jobs=jobs, echo=lambda _: None)
        assert len(outcome.ran) == 18 and (launch.most > 1) == (jobs > 1) and launch.most <= jobs
        # SSGD first: no run starts before its seed's SSGD run ended
        for at, config in enumerate(launch.configs):
            if config["strategy"] != "ssgd":
                earlier = launch.configs[:at]
                assert any(c["strategy"] == "ssgd" and c["seed"] == config["seed"]
                           and c["partition.scheme"] == config["partition.scheme"]
                           for c in earlier)  # fmt: skip
        export_suite(out, tmp_path / f"records{jobs}")
        exported[jobs] = load_records(tmp_path / f"records{jobs}")
    # each record names what made it: the same code and engine, the runs at a time differ
    made_by = {jobs: pop_provenance(records) for jobs, records in exported.items()}
    assert exported[1] == exported[3]
    assert {p["runs-at-a-time"] for p in made_by[1]} == {1}
    assert {p["runs-at-a-time"] for p in made_by[3]} == {3}
    assert {p["engine"] for p in made_by[1] + made_by[3]} == {"separate"}


class HalfWritten(FakeLaunch):
    """A run whose ``history.json`` exists, still empty, for a while before it ends."""

    def __call__(self, command: list[str], log: Path) -> int:
        from flwr.common.config import parse_config_args

        config = parse_config_args([command[command.index("--run-config") + 1]])
        Path(config["output-dir"], "history.json").write_text("")
        time.sleep(1.5)  # longer than the loop's poll: it looks while the file is empty
        return super().__call__(command, log)


def test_a_baseline_history_is_read_only_after_its_run_ended(tmp_path: Path) -> None:
    outcome = run_suite(spec(seeds=(0,)), tmp_path, launch=HalfWritten(), jobs=2,
                        echo=lambda _: None)  # fmt: skip
    assert len(outcome.ran) == 4 and not outcome.failed


def test_a_failed_run_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    lines: list[str] = []
    launch = SlowLaunch(fail={"gsgm"})
    outcome = run_suite(spec(strategies=("ssgd", "asgd", "gsgm"), seeds=(0,)), tmp_path,
                        launch=launch, jobs=2, echo=lines.append)  # fmt: skip
    assert len(outcome.ran) == 4 and len(outcome.failed) == 2
    failed = [line for line in lines if "failed (exit 1)" in line]
    # two runs at a time: either split's GSGM run may end first
    for split in ("dirichlet", "label-skew"):
        folder = "see " + str(run_dir(tmp_path, split, "gsgm", 0))
        assert sum(folder in line for line in failed) == 1


def test_a_run_whose_launch_raises_counts_as_failed(tmp_path: Path) -> None:
    class Broken(FakeLaunch):
        def __call__(self, command: list[str], log: Path) -> int:
            raise OSError("no such program")

    outcome = run_suite(spec(seeds=(0,)), tmp_path, launch=Broken(), echo=lambda _: None)
    assert len(outcome.failed) == 2 and len(outcome.blocked) == 2  # SSGD failed: blocked
    log = (run_dir(tmp_path, "dirichlet", "ssgd", 0) / "run.log").read_text()
    assert "could not be started: OSError('no such program')" in log


# --------------------------------------------------------------------------------- progress


def test_progress_lines_on_fake_runs() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = Progress(total=4, jobs=2, echo=lines.append, clock=lambda: now[0])
    ssgd_run, asgd_run = RunLabel("dirichlet", 0, "ssgd"), RunLabel("dirichlet", 0, "asgd")
    progress.start(ssgd_run, "out/dirichlet/ssgd-seed0")
    now[0] = 30.0
    progress.finish(ssgd_run, 0, 0.9123, queued=["asgd", "asgd-lr0.05", "ssgd"])
    progress.start(asgd_run, "out/dirichlet/asgd-seed0")
    now[0] = 150.0
    progress.finish(asgd_run, 1, None, queued=["asgd-lr0.05", "ssgd"], where="out/x/run.log")
    progress.blocked(RunLabel("label-skew", 1, "asgd"))
    assert lines == [
        "bench: run 1 of 4: dirichlet seed 0 ssgd -> out/dirichlet/ssgd-seed0",
        "bench: run 1 of 4 done in 30 s: dirichlet seed 0 ssgd, final accuracy 91.2%; "
        "0 running, 3 to start, about 45 s left",
        "bench: run 2 of 4: dirichlet seed 0 asgd -> out/dirichlet/asgd-seed0",
        "bench: run 2 of 4 failed (exit 1) after 2 min 0 s: dirichlet seed 0 asgd; see "
        "out/x/run.log; 0 running, 2 to start, about 30 s left",
        "bench: label-skew seed 1 asgd not run: the SSGD run of its seed (its budget) failed",
    ]


def test_the_estimate_of_the_time_left() -> None:
    assert estimate_left({}, [("asgd", 5.0)], ["asgd"], jobs=1) is None
    finished = {"ssgd": [10.0, 30.0], "asgd": [100.0]}  # ssgd 20 s each, asgd 100 s
    assert estimate_left(finished, [], ["ssgd", "asgd"], jobs=1) == 120.0
    assert estimate_left(finished, [], ["ssgd", "asgd"], jobs=2) == 100.0  # the longest
    # asgd running 40 s of its 100; gsgm 140 / 3: (60 + 46.7) / 2 < 60, the longest left
    assert estimate_left(finished, [("asgd", 40.0)], ["gsgm"], jobs=2) == 60.0
    assert estimate_left(finished, [("asgd", 40.0)], ["gsgm"], jobs=1) == pytest.approx(
        60 + 140 / 3
    )
    assert estimate_left(finished, [("asgd", 400.0)], [], jobs=2) == 0.0
    assert [format_duration(s) for s in (0.4, 59.6, 61, 3599, 3600 + 240)] == [
        "0 s", "1 min 0 s", "1 min 1 s", "59 min 59 s", "1 h 4 min"]  # fmt: skip


def test_a_suite_prints_run_k_of_n_for_the_runs_left(tmp_path: Path) -> None:
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lambda _: None)
    lines: list[str] = []
    (run_dir(tmp_path, "dirichlet", "asgd", 0) / "history.json").unlink()
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lines.append)
    assert lines[0].startswith("bench: run 1 of 1: dirichlet seed 0 asgd -> ")
    assert "final accuracy 50.0%; none left" in lines[1] and len(lines) == 2
