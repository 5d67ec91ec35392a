"""``fl-async bench`` through Flower's simulation: a suite made in one simulation (the study
engine) gives the records of the same suite made with one simulation per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import WALL_CLOCK, pop_provenance, without

from fl_async.bench.records import load_records, record_path
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


@pytest.mark.slow(seconds=90)
def test_a_suite_in_one_simulation_has_the_records_of_one_simulation_per_run(tmp_path: Path):
    """Eight runs (two strategies, two splits, two seeds) in one simulation, two at a time;
    then one of them (ASGD, split label-skew, seed 1) again in a simulation of its own, its
    budget read from the study's SSGD record: one launch more, as the suite's runs are compared
    in-process, every one of them, in tests/test_study.py."""
    study, alone = tmp_path / "study", tmp_path / "separate"
    assert main(["bench", *SUITE, "--out", str(study)]) == 0
    records = tmp_path / "study-records"
    assert main(["bench", "--out", str(study), "--export", str(records)]) == 0
    made = {"study": load_records(records)}
    record_path(records, "label-skew", "asgd", 1).unlink()  # to make again; SSGD's is held
    again = [*SUITE, "--engine", "separate", "--records", str(records), "--out", str(alone)]
    for option, value in (("--splits", "label-skew"), ("--seeds", "1")):
        again[again.index(option) + 1] = value
    assert main(["bench", *again]) == 0
    assert main(["bench", "--out", str(alone), "--export", str(tmp_path / "separate-rec")]) == 0
    made["separate"] = load_records(tmp_path / "separate-rec")
    provenance = {engine: pop_provenance(records) for engine, records in made.items()}
    assert sum(len(by_seed) for r in made["study"].values() for by_seed in r.values()) == 8
    one = made["study"]["label-skew"]["asgd"][1]
    assert without(one, WALL_CLOCK) == without(
        made["separate"]["label-skew"]["asgd"][1], WALL_CLOCK
    )
    for engine, found in provenance.items():
        assert {(p["engine"], p["runs-at-a-time"], p["actors"]) for p in found} == {(engine, 2, 2)}
        assert len(found) == (8 if engine == "study" else 1)
        assert all(p["commit"] is None or len(p["commit"]) == 40 for p in found)
    # one simulation for the whole study: its folder, its log, every run's status in its folder
    (folder,) = (study / ".studies").iterdir()
    assert "fl-async: study done: 8 runs" in (folder / "study.log").read_text()
    for status in study.glob("*/*-seed*/run-status.json"):
        assert json.loads(status.read_text())["state"] == "finished"
    assert len(list(study.glob("*/*-seed*/run-status.json"))) == 8
