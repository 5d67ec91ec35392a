"""``fl-async bench`` end to end through Flower's simulation: a tiny suite made in one simulation
(the study engine), two runs at a time, every run with its own record and status; then a sweep
that starts from its runs, and one sweep point made again in a simulation of its own.

One test and three launches, for what were two tests and four launches: a launch costs about
20 CPU-seconds of start-up on two cores, the same whatever runs it makes. That a study's run has
the record of the same run made alone is also checked for every run of a suite in-process, in
tests/test_study.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from bench_fakes import WALL_CLOCK, pop_provenance, without
from idx_files import make_idx_set

from fl_async.bench.grid import derive_grid
from fl_async.bench.records import load_records
from fl_async.cli import main


def tiny(root: Path, *, splits: str = "dirichlet", seeds: str = "0") -> list[str]:
    """The tiny suite's settings, on Fashion-MNIST IDX files under ``root`` (in torchvision's
    layout, so the bench passes ``--data-root`` through to every node), one actor; the
    tiny sweep below uses them too (its one split and seed), and starts from the suite's runs."""
    return [
        "--scenario",
        "a",
        "--splits",
        splits,
        "--seeds",
        seeds,
        "--nodes",
        "4",
        "--rounds",
        "2",
        "--grid",
        "10",
        # ASGD evaluated at every step too: its recorded grid must equal the one derived from
        # its evaluations, as SSGD's is derived. The logistic regression: no check here depends
        # on the model, and the CNN's evaluations at every step were most of the runs' cost.
        "--run-config",
        "eval-every=1 model='logreg'",
        "--actors",
        "1",
        "--dataset",
        "fashion-mnist",
        "--data-root",
        str(root),
    ]


@pytest.mark.slow(seconds=150)
def test_a_tiny_suite_in_one_simulation_then_a_sweep_over_its_runs(tmp_path: Path) -> None:
    """The tiny suite (SSGD and ASGD, two splits, seeds 0 and 1: eight runs, two at a time)
    runs in one simulation on another dataset than the default one, each run with its own
    record and status; it resumes and reports; then a tiny sweep starts from its runs. One
    test, so that the suite runs once (pytest-xdist's groups, which kept two tests on one
    worker, do not hold under pytest 9.2)."""
    root = tmp_path / "data"
    make_idx_set(root, "FashionMNIST", compress=True, rng=np.random.default_rng(0), n_train=120)
    argv = [
        "bench",
        *tiny(root, splits="dirichlet,label-skew", seeds="0,1"),
        "--jobs",
        "2",
        "--strategies",
        "ssgd,asgd",
        "--out",
        str(tmp_path / "suite"),
    ]
    assert main(argv) == 0
    _check_one_simulation_made_every_run(Path(argv[-1]), tmp_path / "suite-records")
    _check_the_tiny_suite(argv, root)
    _check_a_sweep_with_two_jobs(tiny(root), Path(argv[-1]), tmp_path)


def _check_one_simulation_made_every_run(out: Path, exported: Path) -> None:
    """Eight runs in one simulation, two at a time: each with its record, its status and what
    made it."""
    assert main(["bench", "--out", str(out), "--export", str(exported)]) == 0
    records = load_records(exported)
    provenance = pop_provenance(records)
    assert sum(len(by_seed) for r in records.values() for by_seed in r.values()) == 8
    assert len(provenance) == 8
    assert {(p["engine"], p["runs-at-a-time"], p["actors"]) for p in provenance} == {
        ("study", 2, 1)
    }
    assert all(p["commit"] is None or len(p["commit"]) == 40 for p in provenance)
    for split in ("dirichlet", "label-skew"):
        for seed in (0, 1):
            ssgd, asgd = records[split]["ssgd"][seed], records[split]["asgd"][seed]
            assert ssgd["summary"]["stopped-by"] == "budget", ssgd["summary"]
            assert asgd["summary"]["stopped-by"] == "max-virtual-time", asgd["summary"]
    (folder,) = (out / ".studies").iterdir()
    assert "fl-async: study done: 8 runs" in (folder / "study.log").read_text()
    statuses = list(out.glob("*/*-seed*/run-status.json"))
    assert len(statuses) == 8
    for status in statuses:
        assert json.loads(status.read_text())["state"] == "finished"


def _check_the_tiny_suite(argv: list[str], root: Path) -> None:
    out = Path(argv[-1])
    ssgd = json.loads((out / "dirichlet" / "ssgd-seed0" / "history.json").read_text())
    asgd = json.loads((out / "dirichlet" / "asgd-seed0" / "history.json").read_text())
    for history in (ssgd, asgd):
        assert history["config"]["dataset"] == "fashion-mnist"
        assert history["config"]["data-root"] == str(root)
    assert ssgd["stopped-by"] == "budget" and ssgd["num-updates"] == 8
    # ASGD gets SSGD's virtual time as its budget, and stops at the first reply past it
    assert asgd["stopped-by"] == "max-virtual-time"
    assert asgd["virtual-time"] >= ssgd["virtual-time"]
    assert asgd["config"]["max-virtual-time"] == pytest.approx(ssgd["virtual-time"])
    grid = asgd["grid-evaluations"]
    assert [g["index"] for g in grid] == list(range(1, 11)) and not ssgd["grid-evaluations"]
    assert grid[-1]["virtual-time"] == pytest.approx(ssgd["virtual-time"])
    derived = derive_grid(asgd, 10)
    assert [(g["server-step"], g["accuracy"]) for g in derived] == [
        (g["server-step"], pytest.approx(g["accuracy"])) for g in grid
    ]
    report = (out / "report.md").read_text()
    assert "| ssgd | 0,1 | " in report and "| asgd | 0,1 | " in report
    assert "grid of 10 equally spaced virtual times" in report and "no grid" not in report
    assert "fashion-mnist, 4 nodes" in report
    assert (out / "dirichlet" / "accuracy.png").stat().st_size > 0
    runs = json.loads((out / "results.json").read_text())["dirichlet"]["runs"]
    assert runs["ssgd"]["0"]["time-ratio"] == 1.0
    assert (runs["ssgd"]["0"]["grid-source"], runs["asgd"]["0"]["grid-source"]) == (
        "derived",
        "recorded",
    )
    assert len(runs["ssgd"]["0"]["grid-accuracies"]) == 10
    assert runs["ssgd"]["0"]["final-accuracy"] == ssgd["final-accuracy"]
    # resume: nothing left to run, so nothing starts and the histories stay as they were
    before = (out / "dirichlet" / "asgd-seed0" / "history.json").stat().st_mtime
    assert main(argv) == 0
    assert (out / "dirichlet" / "asgd-seed0" / "history.json").stat().st_mtime == before


def _check_a_sweep_with_two_jobs(settings: list[str], suite: Path, tmp_path: Path) -> None:
    """2 strategies x 2 server rates x 1 seed: the tiny suite's two runs are the sweep's default
    points, and the other two run 2 at a time in one simulation. Then one of them runs again
    alone in a simulation of its own (its directory removed, the sweep resumed with 1 job and
    ``--engine separate``): the same records (but wall times and provenance), the same choice."""
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid.ssgd]\nlr = [1.0, 0.5]\n[grid.asgd]\nlr = ["auto", 0.5]\n')
    together, alone = tmp_path / "jobs2", tmp_path / "jobs1"
    shutil.copytree(suite, together)
    records2, chosen2 = _sweep(settings, grid, together, jobs=2)
    shutil.copytree(together, alone)
    shutil.rmtree(alone / "dirichlet" / "asgd-lr0.5-seed0")
    (alone / "tuned.json").unlink()
    # the run made again alone, in a simulation of its own: the study engine changed nothing
    records1, chosen1 = _sweep([*settings, "--engine", "separate"], grid, alone, jobs=1)
    assert set(records1["dirichlet"]) == {"ssgd", "ssgd-lr0.5", "asgd", "asgd-lr0.5"}
    made_by = frozenset({"provenance"})
    assert without(records2, made_by) == without(records1, made_by)
    assert chosen2 == chosen1 and set(chosen1) == {"ssgd", "asgd"}
    # what made each run: the study engine, 2 at a time, but the point made again alone
    made = {
        (strategy, p["engine"], p["runs-at-a-time"])
        for records in (records2, records1)
        for strategy, by_seed in records["dirichlet"].items()
        for p in [by_seed[0]["run"]["provenance"]]
    }
    assert ("asgd-lr0.5", "separate", 1) in made and ("asgd-lr0.5", "study", 2) in made
    assert {engine for _, engine, _ in made} == {"study", "separate"}


def _sweep(settings: list[str], grid: Path, out: Path, *, jobs: int) -> tuple[object, dict]:
    """The tiny sweep over ``grid`` in ``out`` with ``jobs`` runs at once: its exported records
    without wall times, and the settings it chose."""
    argv = ["bench", "--sweep", str(grid), *settings, "--jobs", str(jobs), "--out", str(out)]
    assert main(argv) == 0
    exported = out.with_name(f"{out.name}-records")
    assert main(["bench", "--out", str(out), "--export", str(exported)]) == 0
    chosen = json.loads((out / "tuned.json").read_text())["chosen"]
    return without(load_records(exported), WALL_CLOCK), chosen
