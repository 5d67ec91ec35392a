"""``fl-async bench --records DIR``: a suite run over several machines or sessions, each part's
finished runs committed as records, skips what the records folder holds (no Flower)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bench_fakes import FakeLaunch, bench, spec

from fl_async.bench.export import export_suite, merge_suite
from fl_async.bench.records import load_records, record_path
from fl_async.bench.runner import SuiteOutcome, run_dir
from fl_async.bench.schedule import run_suite
from fl_async.validation import InvalidArgument


def suite(
    out: Path, launch: FakeLaunch, records: Path | None = None, **changes: object
) -> SuiteOutcome:
    """``run_suite`` of ``spec(**changes)`` into ``out``, quiet, with a fake launcher."""
    return run_suite(spec(**changes), out, launch=launch, records=records, echo=lambda _: None)


def test_a_second_machine_runs_only_what_the_records_folder_lacks(tmp_path: Path) -> None:
    whole = FakeLaunch()
    suite(tmp_path / "whole", whole, seeds=(0, 1))  # the suite on one machine, for comparison
    first = tmp_path / "first"
    suite(first, FakeLaunch(), seeds=(0, 1))
    for split in ("dirichlet", "label-skew"):  # seed 1's ASGD runs were cut by the session's end
        shutil.rmtree(run_dir(first, split, "asgd", 1))
    records = tmp_path / "records"
    export_suite(first, records)

    second = FakeLaunch()  # a fresh machine: an empty suite folder
    outcome = suite(tmp_path / "second", second, records, seeds=(0, 1))
    assert [(c["strategy"], c["seed"]) for c in second.configs] == [("asgd", 1), ("asgd", 1)]
    assert len(outcome.held) == 6 and outcome.held == outcome.skipped
    # the budget came from SSGD's record: the same run config as on one machine
    expected = [c for c in whole.configs if (c["strategy"], c["seed"]) == ("asgd", 1)]
    assert [_without_paths(c) for c in second.configs] == [_without_paths(c) for c in expected]

    merge_suite(tmp_path / "second", records)
    single = tmp_path / "single"
    export_suite(tmp_path / "whole", single)
    assert load_records(records) == load_records(single)


def test_a_record_made_with_other_settings_is_run_again(tmp_path: Path) -> None:
    first = tmp_path / "first"
    suite(first, FakeLaunch(), seeds=(0,))
    records = tmp_path / "records"
    export_suite(first, records)
    again = FakeLaunch()
    outcome = suite(tmp_path / "second", again, records, seeds=(0,), nodes=5)
    assert len(again.configs) == 4 and not outcome.held
    assert {c["num-nodes"] for c in again.configs} == {5}
    # SSGD at other rounds, ASGD's budget the same: only SSGD's runs differ from their records
    again = FakeLaunch()
    suite(tmp_path / "third", again, records, seeds=(0,), rounds=3)
    assert [c["strategy"] for c in again.configs] == ["ssgd", "ssgd"]


def test_a_run_done_in_the_suite_folder_is_skipped_as_before(tmp_path: Path) -> None:
    out = tmp_path / "out"
    suite(out, FakeLaunch(), seeds=(0,))
    records = tmp_path / "records"
    export_suite(out, records)
    record_path(records, "dirichlet", "asgd", 0).unlink()
    again = FakeLaunch()
    outcome = suite(out, again, records, seeds=(0,))
    assert not again.configs and len(outcome.skipped) == 4 and len(outcome.held) == 0


def test_records_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(InvalidArgument, match="--records .*nowhere: not a records folder"):
        suite(tmp_path / "out", FakeLaunch(), tmp_path / "nowhere")
    assert not (tmp_path / "out").exists()
    out = tmp_path / "out"
    suite(out, FakeLaunch(), seeds=(0,))
    assert bench("--out", str(out), "--records", str(out), "--strategies", "ssgd") == 2
    assert "not a records folder" in capsys.readouterr().err
    assert bench("--out", str(out), "--report-only", "--records", str(out)) == 2
    assert "--records goes with running a suite" in capsys.readouterr().err


def _without_paths(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "output-dir"}


def test_the_report_names_the_kinds_of_cpu_the_runs_were_made_on(tmp_path: Path) -> None:
    from fl_async.bench.records import machines_line
    from fl_async.bench.report import write_records_report

    out = tmp_path / "out"
    suite(out, FakeLaunch(), seeds=(0,))
    records = tmp_path / "records"
    export_suite(out, records)
    found = load_records(records)["dirichlet"]
    assert machines_line(found) == []  # runs that do not name their CPU: no line
    xeon = {"cpu": "Xeon", "cpu-capability": "AVX512"}
    found["ssgd"][0]["run"]["machine"] = xeon
    found["asgd"][0]["run"]["machine"] = {"cpu": "EPYC", "cpu-capability": "AVX2"}
    assert machines_line(found) == ["Runs made: 1 on EPYC (AVX2), 1 on Xeon (AVX512)."]
    found["asgd"][0]["run"]["machine"] = xeon
    assert machines_line(found) == ["Runs made: 2 on Xeon (AVX512)."]
    path = record_path(records, "dirichlet", "ssgd", 0)
    path.write_text(path.read_text().replace('"run": {', '"run": {"machine": {"cpu": "Xeon"}, ', 1))
    write_records_report(records, "t")
    assert "Runs made: 1 on Xeon." in (records / "report.md").read_text()


def test_the_report_names_each_seeds_busiest_node(tmp_path: Path) -> None:
    from fl_async.bench.records import busiest_node_line

    out = tmp_path / "out"
    suite(out, FakeLaunch(), seeds=(0, 1))
    records = tmp_path / "records"
    export_suite(out, records)
    found = load_records(records)["dirichlet"]
    for seed in (0, 1):
        found["asgd"][seed]["run"].pop("partitions", None)
    assert busiest_node_line(found) == []  # no partition sizes: no line
    found["asgd"][0]["run"]["partitions"] = {"sizes": [400, 1, 30]}
    found["asgd"][0]["node-updates"] = {"0": 10, "1": 85, "2": 5}
    found["asgd"][1]["run"]["partitions"] = {"sizes": [200, 300]}
    found["asgd"][1]["node-updates"] = {"0": 20, "1": 20, "7": 1}  # a tie: the lower id; 7 unknown
    assert busiest_node_line(found) == [
        "Busiest node of ASGD's runs (examples it held, its share of the replies): "
        "seed 0: 1, 85%; seed 1: 200, 49%."
    ]
    found["asgd"][1]["node-updates"] = {"9": 3, "x": 5}  # no partition's id: seed left out
    assert busiest_node_line(found)[0].endswith("seed 0: 1, 85%.")
