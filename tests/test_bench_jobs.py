"""fl_async.bench's --jobs, failed runs and progress lines, with fake runs (no Flower)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from bench_fakes import FakeLaunch, pop_provenance, spec

from fl_async.bench import schedule
from fl_async.bench.export import export_suite
from fl_async.bench.progress import Progress, RunLabel, estimate_left, format_duration
from fl_async.bench.records import load_records
from fl_async.bench.runner import run_dir
from fl_async.bench.schedule import run_suite


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
                assert any(
                    c["strategy"] == "ssgd"
                    and c["seed"] == config["seed"]
                    and c["partition.scheme"] == config["partition.scheme"]
                    for c in earlier
                )
        export_suite(out, tmp_path / f"records{jobs}")
        exported[jobs] = load_records(tmp_path / f"records{jobs}")
    # each record names what made it: the same code and engine, the runs at a time differ
    made_by = {jobs: pop_provenance(records) for jobs, records in exported.items()}
    assert exported[1] == exported[3]
    assert {p["runs-at-a-time"] for p in made_by[1]} == {1}
    assert {p["runs-at-a-time"] for p in made_by[3]} == {3}
    assert {p["engine"] for p in made_by[1] + made_by[3]} == {"separate"}


class HalfWritten(FakeLaunch):
    """A run whose ``history.json`` exists, still empty, for a while before it ends (5 of the
    loop's looks, at the test's ``POLL`` of 0.1 s)."""

    def __call__(self, command: list[str], log: Path) -> int:
        from flwr.common.config import parse_config_args

        config = parse_config_args([command[command.index("--run-config") + 1]])
        Path(config["output-dir"], "history.json").write_text("")
        time.sleep(0.5)  # longer than the loop's poll: it looks while the file is empty
        return super().__call__(command, log)


def test_a_baseline_history_is_read_only_after_its_run_ended(tmp_path, monkeypatch) -> None:
    # The loop looks every POLL seconds (1 s) while runs go: at 0.1 s, a run half written for
    # 0.5 s is looked at as often as one of 1.5 s was, in a third of the time.
    monkeypatch.setattr(schedule, "POLL", 0.1)
    outcome = run_suite(
        spec(seeds=(0,)), tmp_path, launch=HalfWritten(), jobs=2, echo=lambda _: None
    )
    assert len(outcome.ran) == 4 and not outcome.failed


def test_a_failed_run_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    lines: list[str] = []
    launch = SlowLaunch(fail={"gsgm"})
    outcome = run_suite(
        spec(strategies=("ssgd", "asgd", "gsgm"), seeds=(0,)),
        tmp_path,
        launch=launch,
        jobs=2,
        echo=lines.append,
    )
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
        "0 s",
        "1 min 0 s",
        "1 min 1 s",
        "59 min 59 s",
        "1 h 4 min",
    ]


def test_a_suite_prints_run_k_of_n_for_the_runs_left(tmp_path: Path) -> None:
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lambda _: None)
    lines: list[str] = []
    (run_dir(tmp_path, "dirichlet", "asgd", 0) / "history.json").unlink()
    run_suite(spec(seeds=(0,)), tmp_path, launch=FakeLaunch(), echo=lines.append)
    assert lines[0].startswith("bench: run 1 of 1: dirichlet seed 0 asgd -> ")
    assert "final accuracy 50.0%; none left" in lines[1] and len(lines) == 2
