"""The launcher's verdict comes from the file the ServerApp writes last (a run's
``run-status.json``, a study's ``ended.json``), never from a line of the log: fake ``flwr`` and
SuperLink processes, nothing real started."""

import json
import signal
import time
from pathlib import Path

import pytest
from launch_fakes import (
    STUBBORN,
    fake_flwr,
    fake_superlinks,
    flwr_processes,
    stop_graces,
    write_status_script,
)

from fl_async.app import launch, outcome, preflight, run_status, study_files, superlink
from fl_async.app.results import HISTORY
from fl_async.validation import InvalidArgument

OLD_LAST_LINE = (
    "INFO :      fl-async: final accuracy 91.0% after 8 updates (budget), virtual time 3.0 s, "
    "wall time 1.0 s; wrote /x/history.json"
)
"""The ServerApp's last log line, which once told the launcher that a run completed."""
SLEEPER = "import time; time.sleep(60)"
"""A SuperLink that stops at SIGTERM."""
FAILED_LS = "print(json.dumps({'runs': [{'status': 'finished:failed'}]}))"


def finished(output: Path, stopped_by="budget", detail="") -> run_status.RunStatus:
    history = {"stopped-by": stopped_by, "stop-detail": detail, "num-updates": 8}
    history.update({"final-accuracy": 0.912, "virtual-time": 30.04})
    output.mkdir(parents=True, exist_ok=True)
    (output / HISTORY).write_text(json.dumps(history))
    status = run_status.finished(history, [output / HISTORY, output / "accuracy.png"])
    run_status.write_run_status(output, status)
    return status


def test_a_status_is_written_and_read_back_whole(tmp_path):
    status = finished(tmp_path / "a", detail="budget of 8 updates spent")
    assert run_status.read_run_status(tmp_path / "a") == status
    written = json.loads((tmp_path / "a" / "run-status.json").read_text())
    assert written["history"] == str(tmp_path / "a" / HISTORY)
    assert written["plots"] == [str(tmp_path / "a" / "accuracy.png")]
    assert written["num-updates"] == 8 and written["stopped-by"] == "budget"
    failed = run_status.ended(run_status.FAILED, "ValueError:\n  bad")
    run_status.write_run_status(tmp_path / "b", failed)
    assert (
        run_status.read_run_status(tmp_path / "b") == failed and failed.reason == "ValueError: bad"
    )
    assert run_status.read_run_status(tmp_path / "none") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not a run status (not JSON"),
        ("[1]", "a JSON list, not an object"),
        ('{"stopped-by": "budget"}', "(no state)"),
        ('{"state": "done"}', "(state 'done')"),
        ('{"state": "finished", "history": "/x/history.json"}', "(no stopped-by)"),
        (
            '{"state": "finished", "stopped-by": "budget", "history": "/x", "num-updates": "8"}',
            "(num-updates = '8')",
        ),
    ],
)
def test_a_damaged_status_is_one_clear_error(tmp_path, text, message):
    (tmp_path / "run-status.json").write_text(text)
    with pytest.raises(InvalidArgument, match=r"run-status\.json is not a run status") as raised:
        run_status.read_run_status(tmp_path)
    assert message in str(raised.value)
    code, line = outcome.verdict(tmp_path, None)
    assert code == 1 and line.startswith("fl-async: the run failed: ") and message in line


def test_the_verdict_reads_the_status(tmp_path):
    finished(tmp_path / "a")
    assert outcome.verdict(tmp_path / "a", None) == (
        0,
        "fl-async: done (budget): final accuracy 91.2% after 8 updates, virtual time 30.0 s; "
        f"results in {tmp_path / 'a'}",
    )
    finished(tmp_path / "b", "no-active-nodes", "every node left:\n0 raised")
    code, line = outcome.verdict(tmp_path / "b", None)
    assert code == 1 and "\n" not in line
    assert "could not make progress (no-active-nodes: every node left: 0 raised)" in line
    run_status.write_run_status(tmp_path / "c", run_status.ended("failed", "KeyError: 'x'"))
    assert outcome.verdict(tmp_path / "c", None) == (
        1,
        "fl-async: the run failed: KeyError: 'x'; see the log above",
    )


def test_a_history_without_a_status_is_no_success(tmp_path):
    """A run that crashed after its history (or an earlier run's history) is no success."""
    (tmp_path / HISTORY).write_text(json.dumps({"stopped-by": "budget"}))
    code, line = outcome.verdict(tmp_path, "finished:failed")
    assert code == 1
    assert "wrote no run-status.json (Flower's status 'finished:failed')" in line
    assert str(tmp_path / "superlink.log") in line


def test_a_study_is_done_when_its_serverapp_wrote_its_end(tmp_path):
    code, line = outcome.study_verdict(tmp_path, "finished:completed")
    assert code == 1 and "wrote no ended.json (Flower's status 'finished:completed')" in line
    study_files.write_ended(tmp_path, 3)
    assert outcome.study_verdict(tmp_path, None) == (
        0,
        "fl-async: study done: 3 runs; their results are in their output folders",
    )
    (tmp_path / "ended.json").write_text('{"runs": "three"}')
    code, line = outcome.study_verdict(tmp_path, None)
    assert code == 1 and "is not a study's end" in line


def launched(monkeypatch, tmp_path, body: str, *argv: str, link=SLEEPER) -> tuple[int, list]:
    """``_launch`` with a ``flwr`` that runs ``body`` (``flwr ls`` reports a failed run) and a
    SuperLink running ``link``; its exit code and the ``flwr`` processes it started."""
    bin_dir = tmp_path / "bin"
    fake_flwr(
        bin_dir,
        f"import json, sys, time\nif sys.argv[1] == 'ls':\n    {FAILED_LS}\n    sys.exit()\n{body}",
    )
    fake_superlinks(monkeypatch, bin_dir, link, settle=0.5)
    monkeypatch.setattr(superlink, "STOP_GRACE", 30.0)
    monkeypatch.setattr(launch, "_start_ray_head", lambda *args: None)
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "1", *argv])
    flwr = flwr_processes(monkeypatch)
    return launch._launch(plan, args, None), flwr


def test_the_status_file_ends_the_run_at_once(monkeypatch, tmp_path, capsys):
    """Once the status is written the results are: the launcher stops flwr run without
    waiting for Flower and Ray to shut down (seconds), nor gives the SuperLink a grace."""
    body = "print('Successfully started run 7', flush=True)\n"
    body += write_status_script(tmp_path / "out") + "time.sleep(60)"
    graces = stop_graces(monkeypatch)
    began = time.monotonic()
    # A SuperLink that ignores SIGTERM: it would take the 30-s grace unless killed at once.
    code, flwr = launched(monkeypatch, tmp_path, body, link=STUBBORN)
    assert code == 0 and time.monotonic() - began < 20
    assert [p.returncode for p in flwr] == [-signal.SIGTERM]  # stopped, not its minute out
    assert graces == [0.0]  # not the 30-s grace
    out = capsys.readouterr().out
    assert "Successfully started run 7" in out  # flwr's output is echoed
    assert f"fl-async: done (budget): 8 updates; results in {tmp_path / 'out'}" in out


def test_the_serverapps_last_line_alone_is_no_success(monkeypatch, tmp_path, capsys):
    body = f"print('Successfully started run 7')\nprint({OLD_LAST_LINE!r}, flush=True)"
    code, flwr = launched(monkeypatch, tmp_path, body)
    assert code == 1 and [p.returncode for p in flwr] == [0, 0]  # flwr run, then flwr ls
    assert "wrote no run-status.json (Flower's status 'finished:failed')" in capsys.readouterr().out


def test_an_earlier_runs_status_does_not_count(monkeypatch, tmp_path, capsys):
    finished(tmp_path / "out")
    code, _ = launched(monkeypatch, tmp_path, "print('Successfully started run 7')")
    assert code == 1 and "wrote no run-status.json" in capsys.readouterr().out


def test_a_run_that_failed_says_why(monkeypatch, tmp_path, capsys):
    body = (
        "from fl_async.app import run_status as s\n"
        f"s.write_run_status(__import__('pathlib').Path({str(tmp_path / 'out')!r}), "
        "s.ended('failed', 'RuntimeError: out of memory'))"
    )
    assert launched(monkeypatch, tmp_path, body)[0] == 1
    assert "the run failed: RuntimeError: out of memory" in capsys.readouterr().out


def test_a_studys_end_file_ends_its_simulation(monkeypatch, tmp_path, capsys):
    body = f"import pathlib\n(pathlib.Path({str(tmp_path / 'out')!r}) / 'ended.json')"
    body += ".write_text('{\"runs\": 2}')\ntime.sleep(60)"
    code, flwr = launched(monkeypatch, tmp_path, body, "--study", str(tmp_path / "out"))
    assert code == 0 and [p.returncode for p in flwr] == [-signal.SIGTERM]
    assert "fl-async: study done: 2 runs" in capsys.readouterr().out
