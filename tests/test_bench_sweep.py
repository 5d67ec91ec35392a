"""fl_async.bench's sweeps, tuned settings, --jobs and progress, with fake runs (no Flower)."""

from __future__ import annotations

import json
from pathlib import Path

import benchmark_modules  # noqa: F401 (benchmarks/blocks.py, imported as the scripts do)
import blocks
import pytest
from bench_fakes import FakeLaunch, parse, run, write_finished

from fl_async.bench.commands import write_choice
from fl_async.bench.export import export_suite
from fl_async.bench.options import build_spec, build_sweep
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
        (
            "[grid.asgd]\nlr = [0.1, 0.2]\n[grid.gsgm]\nlr = [0.1]\nmomentum = [0.8, 0.9]\n"
            "[grid.ssgd]\nlr = [1.0]\n",
            "every strategy must get a grid of the same size, got asgd 2, gsgm 2, ssgd 1 points",
        ),
        ("[grid.asgd]\nnope = [1]\n", "[grid.asgd]: unknown hyperparameter 'nope'; allowed: lr"),
        ("[grid.asgd]\nlr = []\n", "lr must be a non-empty list"),
        ("[grid.asgd]\nlr = [0.1, 0.1]\n", "lists a value twice"),
        (
            "[grid.asgd]\nlr = ['fast']\n",
            "[grid.asgd]: run config 'asgd.lr' must be a number, 'auto' or 'default', got 'fast'",
        ),
        ("[grid]\n", "no [grid.<strategy>] table"),
        ("rule = 1\n[grid.asgd]\nlr = [0.1]\n", "unknown keys rule"),
        ("tie-margin = -1\n[grid.asgd]\nlr = [0.1]\n", "tie-margin must be a number"),
        ("[grid.asgd\n", "cannot read it"),
    ],
)
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
    options = "--nodes 4 --rounds 2 --seeds 0,1 --splits dirichlet --grid 4".split()
    args = parse("--sweep", str(path), "--out", str(out), *options)
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
        "dirichlet seed 0: no run",
        "dirichlet seed 1: no run",
    ]
    assert tuned["settings"]["nodes"] == 4 and "sigma_acc" in tuned["rule"]
    assert load_tuned(out / "tuned.json") == {"asgd": {"asgd.lr": "auto"}, "ssgd": {"ssgd.lr": 1.0}}
    # a later suite runs each strategy's chosen settings beside its defaults
    later = build_spec(
        parse("--out", "x", "--strategies", "ssgd,asgd,gsgm", "--tuned", str(out / "tuned.json"))
    )
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
