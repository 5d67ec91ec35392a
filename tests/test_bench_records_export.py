"""fl_async.bench's raw results without Flower: compact records, the export of a suite folder
to a records folder, and the merge of a later part of a suite into one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bench_fakes import SUITE, bench, hand_made_suite, old, run, spec, ssgd, write_runs

from fl_async.bench.export import SUITE_FORMAT, export_suite, is_records_folder, merge_suite
from fl_async.bench.records import RECORD_FORMAT, dumps, load_records, make_record
from fl_async.config import DEFAULTS
from fl_async.validation import InvalidArgument

# ------------------------------------------------------------------------------- records


def test_a_record_keeps_what_the_report_reads_and_no_update_log() -> None:
    history = run([0.5, 0.6, 0.7, 0.9])
    history["config"].update({"strategy": "asgd", "asgd.lr": 0.5, "gsgm.lr": 0.1})
    history["config"].update({"output-dir": "/tmp/x", "data-root": "/home/y"})
    history["updates"] = [{"staleness": s, "accepted": 1, "stable-id": s % 3} for s in range(7)]
    history.update({"num-nodes": 3, "faults": {"timeout": 2}, "rejected": {"stale": 1}})
    record = make_record(history, 40)
    assert record["format"] == RECORD_FORMAT and "updates" not in record
    # the machine's paths and the other strategies' keys are left out
    assert "asgd.lr" in record["config"] and "gsgm.lr" not in record["config"]
    assert "output-dir" not in record["config"] and "data-root" not in record["config"]
    grid = record["grid"]
    assert (grid["source"], grid["size"], grid["budget"]) == ("recorded", 4, 400.0)
    assert grid["evaluations"][1] == {
        "index": 2,
        "virtual-time": 200.0,
        "wall-time": 6.0,
        "accuracy": 0.6,
        "loss": 1.0,
        "server-step": 8,
    }
    summary = record["summary"]
    assert (summary["staleness-mean"], summary["staleness-max"]) == (3.0, 6)
    assert (summary["replies"], summary["applied"], summary["evaluations"]) == (7, 7, 5)
    assert (summary["faults"], summary["rejected"]) == ({"timeout": 2}, {"stale": 1})
    assert record["node-updates"] == {"0": 3, "1": 2, "2": 2}
    assert record["run"] == {"num-nodes": 3}
    # SSGD's grid is derived from its every-step evaluations, and says so
    derived = make_record(ssgd([0.1, 0.5, 0.6, 0.7, 0.8]), 8)["grid"]
    assert (derived["source"], derived["size"], len(derived["evaluations"])) == ("derived", 8, 8)
    assert make_record(old([0.5]))["grid"] is None


def test_dumps_is_deterministic_with_sorted_keys_and_exact_floats() -> None:
    value = {"b": [0.1 + 0.2, 1 / 3], "a": {"z": 1, "y": None}, "c": [{"k": 1}, []]}
    text = dumps(value)
    assert text == dumps(json.loads(text)) and text.endswith("}\n")
    assert json.loads(text) == value  # floats round-trip exactly
    assert text.index('"a"') < text.index('"b"') and '"y": null, "z": 1' in text
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


# -------------------------------------------------------------------------------- export


def test_export_writes_suite_json_and_one_record_per_run(tmp_path: Path) -> None:
    suite = hand_made_suite(tmp_path / "suite")
    assert bench("--out", str(suite), "--export", str(tmp_path / "records")) == 0
    records = tmp_path / "records"
    assert is_records_folder(records) and not is_records_folder(suite)
    settings = json.loads((records / "suite.json").read_text())
    assert settings["format"] == SUITE_FORMAT and settings["grid"] == 4
    assert settings["settings"]["strategies"] == ["asgd", "ssgd"]
    assert settings["settings"]["run-config"] == {"local-epochs": 1}  # no data-root path
    assert settings["command"] == "fl-async bench"
    assert settings["records"]["dirichlet"]["fedbuff"] == [0, 1]
    files = sorted(p.relative_to(records).as_posix() for p in records.rglob("*.json"))
    assert len(files) == 12 and "dirichlet/gsgm-seed2.json" in files
    record = json.loads((records / "dirichlet" / "ssgd-seed1.json").read_text())
    assert (record["split"], record["strategy"], record["seed"]) == ("dirichlet", "ssgd", 1)
    assert record["grid"]["size"] == 4  # the split's recorded G, not the suite's
    assert max(p.stat().st_size for p in records.rglob("*.json")) < 4000
    before = {p: p.read_bytes() for p in records.rglob("*.json")}
    assert bench("--out", str(suite), "--export", str(records)) == 0
    assert {p: p.read_bytes() for p in records.rglob("*.json")} == before  # byte-identical
    # a run the suite no longer has loses its record
    shutil.rmtree(suite / "dirichlet" / "fedbuff-seed1")
    assert bench("--out", str(suite), "--export", str(records)) == 0
    assert not (records / "dirichlet" / "fedbuff-seed1.json").exists()
    assert set(load_records(records)["dirichlet"]["fedbuff"]) == {0}


def test_export_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = hand_made_suite(tmp_path / "suite")
    with pytest.raises(InvalidArgument, match="is the suite folder"):
        export_suite(suite, suite)
    hand_made_suite(tmp_path / "other")
    with pytest.raises(InvalidArgument, match="other is a suite folder"):
        export_suite(suite, tmp_path / "other")
    with pytest.raises(InvalidArgument, match="nothing to export"):
        export_suite(tmp_path, tmp_path / "records")
    export_suite(suite, tmp_path / "records")
    assert bench("--out", str(tmp_path / "records"), "--export", str(tmp_path / "again")) == 2
    assert "is a records folder already" in capsys.readouterr().err
    assert bench("--out", str(tmp_path / "missing"), "--export", str(tmp_path / "x")) == 2
    assert "no suite folder" in capsys.readouterr().err
    # a suite is never run into a records folder (its suite.json is not a suite folder's)
    assert bench("--out", str(tmp_path / "records"), "--strategies", "ssgd") == 2
    assert "is a records folder: use --report-only" in capsys.readouterr().err
    assert bench("--export", str(tmp_path / "x")) == 2
    assert "--out is required" in capsys.readouterr().err


def _suite_part(out: Path, seeds: tuple[int, ...], at: str) -> Path:
    """``hand_made_suite``'s runs of ``seeds`` only, as a suite folder called at ``at``."""
    write_runs(
        out, {name: {s: h for s, h in runs.items() if s in seeds} for name, runs in SUITE.items()}
    )
    latest = spec(scenario=spec().scenario, grid=4, seeds=seeds).as_json()
    argv = ["/x/.venv/bin/fl-async", "bench", "--seeds", ",".join(map(str, seeds))]
    call = {"at": at, "argv": argv, **latest}
    (out / "suite.json").write_text(json.dumps({"calls": [call], "latest": latest}))
    return out


def test_merge_adds_a_later_part_of_a_suite_and_keeps_what_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    whole, records = tmp_path / "whole", tmp_path / "records"
    expected = tmp_path / "expected"
    assert bench("--out", str(hand_made_suite(whole)), "--export", str(expected)) == 0
    first = _suite_part(tmp_path / "first", (0, 1), "2026-11-23T01:00:00+0000")
    assert bench("--out", str(first), "--export", str(records)) == 0
    kept = {p: p.read_bytes() for p in records.rglob("*-seed*.json")}
    second = _suite_part(tmp_path / "second", (1, 2), "2026-11-24T01:00:00+0000")
    assert bench("--out", str(second), "--export", str(records), "--merge") == 0
    out = capsys.readouterr().out
    # seed 1 is in both parts: its records stay as they were, and the note compares the runs
    assert (
        "dirichlet/asgd-seed1: kept the record already there; the new run's grid "
        "accuracies are identical" in out
    )
    assert all(p.read_bytes() == before for p, before in kept.items())
    assert load_records(records) == load_records(expected)
    merged = json.loads((records / "suite.json").read_text())
    assert merged["records"] == json.loads((expected / "suite.json").read_text())["records"]
    assert merged["settings"]["seeds"] == [0, 1, 2]
    assert [call["at"] for call in merged["calls"]] == [
        "2026-11-23T01:00:00+0000",
        "2026-11-24T01:00:00+0000",
    ]
    assert merged["command"] == "fl-async bench --seeds 1,2"
    # merging the same part again changes nothing
    before = {p: p.read_bytes() for p in records.rglob("*.json")}
    assert bench("--out", str(second), "--export", str(records), "--merge") == 0
    assert {p: p.read_bytes() for p in records.rglob("*.json")} == before


def test_merge_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    records = tmp_path / "records"
    part = _suite_part(tmp_path / "part", (0,), "2026-11-23T01:00:00+0000")
    with pytest.raises(InvalidArgument, match="not a records folder; export the first part"):
        merge_suite(part, records)
    export_suite(part, records)
    other = _suite_part(tmp_path / "other", (2,), "2026-11-24T01:00:00+0000")
    suite_json = json.loads((other / "suite.json").read_text())
    suite_json["latest"]["nodes"] = 8
    (other / "suite.json").write_text(json.dumps(suite_json))
    with pytest.raises(InvalidArgument, match="differ from the records folder's in nodes"):
        merge_suite(other, records)
    suite_json["latest"]["nodes"] = 4
    suite_json["latest"]["variants"] = {"x": {"preset": "gsgm", "run-config": {"gsgm.lr": 1.0}}}
    (other / "suite.json").write_text(json.dumps(suite_json))
    merge_suite(other, records)  # a new variant is added to the folder's
    assert json.loads((records / "suite.json").read_text())["settings"]["variants"] == {
        "x": {"preset": "gsgm", "run-config": {"gsgm.lr": 1.0}}
    }
    suite_json["latest"]["variants"]["x"]["run-config"] = {"gsgm.lr": 0.5}
    (other / "suite.json").write_text(json.dumps(suite_json))
    with pytest.raises(InvalidArgument, match="variant 'x' is .* give the new one another name"):
        merge_suite(other, records)
    changed = _suite_part(tmp_path / "changed", (0,), "2026-11-24T01:00:00+0000")
    history_path = changed / "dirichlet" / "asgd-seed0" / "history.json"
    history = json.loads(history_path.read_text())
    history["config"]["lr"] = 0.5
    history_path.write_text(json.dumps(history))
    with pytest.raises(InvalidArgument, match="asgd-seed0 is in both with different run configs"):
        merge_suite(changed, records)
    assert bench("--out", str(part), "--merge") == 2
    assert "--merge goes with --export" in capsys.readouterr().err


def test_merge_takes_a_key_added_since_a_record_at_its_default(tmp_path: Path) -> None:
    """A run made after the schema gained a key (at the default that keeps what runs did) is the
    same run as one recorded before: the merge keeps the record; another value is refused."""
    records = tmp_path / "records"
    export_suite(_suite_part(tmp_path / "part", (0,), "2026-11-23T01:00:00+0000"), records)
    for value, kept in ((DEFAULTS["synthetic.devices"], True), (7, False)):
        later = _suite_part(tmp_path / f"later-{value}", (0,), "2026-11-24T01:00:00+0000")
        history_path = later / "dirichlet" / "asgd-seed0" / "history.json"
        history = json.loads(history_path.read_text())
        assert "synthetic.devices" not in history["config"]
        history["config"]["synthetic.devices"] = value
        history_path.write_text(json.dumps(history))
        if kept:
            _, notes = merge_suite(later, records)
            assert any(note.startswith("dirichlet/asgd-seed0: kept the record") for note in notes)
        else:
            refused = r"different run configs \(synthetic.devices\)"
            with pytest.raises(InvalidArgument, match=refused):
                merge_suite(later, records)
