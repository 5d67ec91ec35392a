"""``fl-async bench`` through Flower's simulation: a suite made in one simulation (the study
engine), every run with its own record and status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import pop_provenance

from fl_async.bench.records import load_records
from fl_async.cli import main

SUITE = [
    "--scenario",
    "a",
    "--splits",
    "dirichlet,label-skew",
    "--seeds",
    "0,1",
    "--strategies",
    "ssgd,asgd",
    "--nodes",
    "4",
    "--rounds",
    "1",
    "--grid",
    "5",
    "--actors",
    "2",
    "--jobs",
    "2",
]
"""The study: 2 strategies x 2 splits x 2 seeds, two at a time."""


@pytest.mark.slow(seconds=60)
def test_a_suite_in_one_simulation_makes_every_run_with_its_own_status(tmp_path: Path):
    """Eight runs (two strategies, two splits, two seeds) in one simulation, two at a time,
    each with its record, its status and what made it. That a study's run has the record of
    the same run made in a simulation of its own is checked through Flower in
    tests/test_bench_slow.py (a sweep point made again with ``--engine separate``) and for every
    run of a suite in-process in tests/test_study.py: one launch here, not two."""
    study = tmp_path / "study"
    assert main(["bench", *SUITE, "--out", str(study)]) == 0
    exported = tmp_path / "study-records"
    assert main(["bench", "--out", str(study), "--export", str(exported)]) == 0
    records = load_records(exported)
    provenance = pop_provenance(records)
    assert sum(len(by_seed) for r in records.values() for by_seed in r.values()) == 8
    assert {(p["engine"], p["runs-at-a-time"], p["actors"]) for p in provenance} == {
        ("study", 2, 2)
    }
    assert len(provenance) == 8
    assert all(p["commit"] is None or len(p["commit"]) == 40 for p in provenance)
    for split in ("dirichlet", "label-skew"):
        for seed in (0, 1):
            ssgd, asgd = records[split]["ssgd"][seed], records[split]["asgd"][seed]
            assert ssgd["summary"]["stopped-by"] == "budget", ssgd["summary"]
            assert asgd["summary"]["stopped-by"] == "max-virtual-time", asgd["summary"]
    # one simulation for the whole study: its folder, its log, every run's status in its folder
    (folder,) = (study / ".studies").iterdir()
    assert "fl-async: study done: 8 runs" in (folder / "study.log").read_text()
    statuses = list(study.glob("*/*-seed*/run-status.json"))
    assert len(statuses) == 8
    for status in statuses:
        assert json.loads(status.read_text())["state"] == "finished"
