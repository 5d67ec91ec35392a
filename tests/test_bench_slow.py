"""``fl-async bench`` end to end: a tiny suite through the launcher and Flower's simulation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from bench_fakes import WALL_CLOCK, without
from idx_files import make_idx_set

from fl_async.bench.grid import derive_grid
from fl_async.bench.records import load_records
from fl_async.cli import main


def tiny(root: Path) -> list[str]:
    """The tiny suite's settings, on Fashion-MNIST IDX files under ``root`` (read by
    torchvision, so the bench passes ``--data-root`` through to every node); the tiny sweep
    below uses them too, and starts from its runs."""
    return [
        "--scenario",
        "a",
        "--splits",
        "dirichlet",
        "--seeds",
        "0",
        "--nodes",
        "4",
        "--rounds",
        "2",
        "--grid",
        "10",
        # ASGD evaluated at every step too: its recorded grid must equal the one derived from
        # its evaluations, as SSGD's is derived
        "--run-config",
        "eval-every=1",
        "--actors",
        "1",
        "--dataset",
        "fashion-mnist",
        "--data-root",
        str(root),
    ]


@pytest.mark.slow(seconds=130)
def test_a_tiny_suite_on_fashion_mnist_then_a_sweep_over_its_runs(tmp_path: Path) -> None:
    """The tiny suite (SSGD and ASGD, seed 0) runs on another dataset than the default one,
    resumes and reports; then a tiny sweep starts from its runs. One test, so that the suite
    runs once (pytest-xdist's groups, which kept two tests on one worker, do not hold under
    pytest 9.2)."""
    root = tmp_path / "data"
    make_idx_set(root, "FashionMNIST", compress=True, rng=np.random.default_rng(0), n_train=120)
    settings = tiny(root)
    argv = ["bench", *settings, "--strategies", "ssgd,asgd", "--out", str(tmp_path / "suite")]
    assert main(argv) == 0
    _check_the_tiny_suite(argv, root)
    _check_a_sweep_with_two_jobs(settings, Path(argv[-1]), tmp_path)


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
    assert "| ssgd | 0 | " in report and "| asgd | 0 | " in report
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
