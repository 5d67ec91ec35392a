"""benchmarks/runs_at_a_time.py: the same bench runs at each --jobs, timed in alternating passes
with SSGD's runs made once, the histories compared, and its table."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    runs_at_a_time = importlib.import_module("runs_at_a_time")
    jobs_table = importlib.import_module("tables.runs_at_a_time")

# A stand-in for `fl-async bench`: each strategy's run (not there yet) writes a history; its
# accuracy moves with --jobs where the run config asks for it.
FAKE_BENCH = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
get = lambda name: args[args.index(name) + 1]
out, jobs = Path(get("--out")), int(get("--jobs"))
with open(out.parent / "calls.log", "a") as log:
    log.write(" ".join(args) + "\\n")
drift = "drift" in args
if "fail" in args and "asgd" in get("--strategies"):
    sys.exit("boom")
for name in get("--strategies").split(","):
    run = out / "dirichlet" / f"{name}-seed0"
    if (run / "history.json").exists():
        continue
    run.mkdir(parents=True)
    history = {key: [] for key in ("updates", "evaluations", "faults", "rejected")}
    history.update({"num-updates": 3, "server-steps": 3, "virtual-time": 9.0, "final-loss": 0.5,
                    "stopped-by": "budget", "wall-time": 1.0 / jobs,
                    "final-accuracy": 0.9 + (jobs / 100 if drift else 0)})
    (run / "history.json").write_text(json.dumps(history))
"""


@pytest.fixture
def fake_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE_BENCH)
    monkeypatch.setattr(runs_at_a_time, "BENCH", [sys.executable, str(script)])
    return tmp_path / "work"


def _main(work: Path, out: Path, *bench: str) -> int:
    argv = [
        "--strategies",
        "asgd,fedbuff",
        "--jobs",
        "1,2",
        "--repeat",
        "2",
        "--work",
        str(work),
        "--out",
        str(out),
        "--label",
        "test",
        "--",
        "--scenario",
        "a",
        *bench,
    ]
    return runs_at_a_time.main(argv)


def test_each_pass_times_only_the_strategies_and_the_same_histories_pass(
    fake_bench: Path, tmp_path: Path
) -> None:
    assert _main(fake_bench, tmp_path / "measured") == 0
    (path,) = (tmp_path / "measured").glob("runs-at-a-time-*.json")
    result = json.loads(path.read_text())
    assert [p["jobs"] for p in result["passes"]] == [1, 2, 1, 2]  # alternating
    assert result["same-histories"] and result["runs"] == 3  # SSGD's copied in, two timed
    calls = (fake_bench / "calls.log").read_text().splitlines()
    assert calls[0].endswith(f"--strategies ssgd --jobs 1 --out {fake_bench / 'ssgd'}")
    assert all("--scenario a --strategies ssgd,asgd,fedbuff --jobs" in c for c in calls[1:])
    assert len(calls) == 5
    table = jobs_table.table(result)
    assert "the same in every pass" in table and "| 2 |" in table


def test_histories_that_change_with_the_jobs_are_reported_and_fail(
    fake_bench: Path, tmp_path: Path
) -> None:
    assert _main(fake_bench, tmp_path / "measured", "--run-config", "drift") == 1
    (path,) = (tmp_path / "measured").glob("runs-at-a-time-*.json")
    result = json.loads(path.read_text())
    assert not result["same-histories"]
    assert "**not** the same" in jobs_table.table(result)


def test_a_failed_pass_stops_the_benchmark_with_its_command_and_log(
    fake_bench: Path, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit, match=r"exit 1: .*--strategies ssgd,asgd,fedbuff(.|\n)*boom"):
        _main(fake_bench, tmp_path / "measured", "--run-config", "fail")
    assert not (tmp_path / "measured").exists()  # nothing written


def test_the_pace_is_the_first_settings_median_wall_over_each_ones() -> None:
    walls = [(1, 100.0), (2, 60.0), (1, 110.0), (2, 80.0)]
    result = {"jobs": [1, 2], "passes": [{"jobs": j, "wall": w} for j, w in walls]}
    assert jobs_table.pace(result) == {1: 1.0, 2: pytest.approx(105.0 / 70.0)}


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--strategies", "ssgd,asgd"], "SSGD's runs are made once"),
        (["--strategies", "asgd", "--jobs", "1,0"], "--jobs must list distinct integers >= 1"),
        (["--strategies", "asgd", "--jobs", "2,2"], "got '2,2'"),
        (["--strategies", "asgd", "--repeat", "0"], "--repeat must be at least 1, got 0"),
        (["--strategies", "asgd", "--", "--out", "x"], "BENCH_ARGS may not set --out"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        runs_at_a_time.parse(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_an_existing_work_folder_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        runs_at_a_time.parse(["--strategies", "asgd", "--work", str(tmp_path)])
    assert f"--work {tmp_path} exists" in capsys.readouterr().err
