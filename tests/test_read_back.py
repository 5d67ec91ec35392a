"""Every JSON file a run or a suite reads back (history.json, bench records, suite files): a
damaged or foreign one is one line naming the file and what is wrong, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fl_async import cli
from fl_async.app.results import HISTORY, read_history
from fl_async.files import read_json
from fl_async.validation import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results" / "suites" / "presets-a"

DAMAGED = {
    "random": np.random.default_rng(3).bytes(500),
    "truncated": b'{"stopped-by": "budget", "evaluations": [',
    "list": b"[1, 2, 3]",
    "nan": b'{"x": NaN}',
    "empty": b"",
    "foreign": b'{"name": "package.json of another program", "version": "1.0"}',
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_or_foreign_history_is_one_line_naming_it(tmp_path, kind):
    path = tmp_path / HISTORY
    path.write_bytes(DAMAGED[kind])
    with pytest.raises(InvalidArgument) as caught:
        read_history(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "run history" in message
    assert "delete its run folder" in message


def test_read_json_says_what_is_missing_and_reads_a_good_file(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"calls": []}))
    assert read_json(path, "suite file", keys=("calls",)) == {"calls": []}
    with pytest.raises(InvalidArgument, match=r"is not a suite file \(no latest, format\)"):
        read_json(path, "suite file", keys=("latest", "format"))
    with pytest.raises(InvalidArgument, match="cannot read this suite file"):
        read_json(tmp_path / "missing.json", "suite file")


def _refused(capsys, argv: list[str]) -> str:
    assert cli.main(["bench", *argv]) == 2  # the fl-async bench command
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.out + captured.err, captured
    return lines[0]


def test_a_suite_folder_with_a_damaged_history_reports_one_line(tmp_path, capsys):
    run = tmp_path / "dirichlet" / "asgd-seed0"
    run.mkdir(parents=True)
    (run / HISTORY).write_bytes(DAMAGED["truncated"])
    line = _refused(capsys, ["--report-only", "--out", str(tmp_path)])
    assert str(run / HISTORY) in line and "not JSON" in line


@pytest.mark.parametrize("kind", ["random", "foreign", "list"])
def test_a_records_folder_with_a_damaged_record_reports_one_line(tmp_path, capsys, kind):
    folder = tmp_path / "records"
    shutil.copytree(RECORDS, folder)
    record = sorted(folder.glob("*/*-seed*.json"))[0]
    record.write_bytes(DAMAGED[kind])
    line = _refused(capsys, ["--report-only", "--out", str(folder)])
    assert str(record) in line and "bench record" in line


def test_a_damaged_suite_file_reports_one_line(tmp_path, capsys):
    folder = tmp_path / "records"
    shutil.copytree(RECORDS, folder)
    (folder / "suite.json").write_bytes(DAMAGED["random"])
    line = _refused(capsys, ["--report-only", "--out", str(folder)])
    assert str(folder / "suite.json") in line and "suite file" in line
