"""The launcher's verdict on a finished ``flwr run``: its exit code and the line saying why."""

from __future__ import annotations

import json
from pathlib import Path

from fl_async.app.results import HISTORY
from fl_async.strategies import FAILED_STOPS

SUPERLINK_LOG = "superlink.log"
COMPLETED = "finished:completed"
"""The status ``flwr ls`` gives a run whose ServerApp returned."""


def verdict(status: str, output: Path, started: float) -> tuple[int, str]:
    """0 when the run completed, wrote ``history.json`` after ``started`` (a time.time()) and
    did not stop for want of progress (``FAILED_STOPS``); else 1. With the line to print."""
    history = output / HISTORY
    # A history left by an earlier run in the same directory does not count.
    written = history.is_file() and history.stat().st_mtime >= started
    record = _read(history) if written else None
    if status != COMPLETED or record is None:
        wrote = "written" if record is not None else "not written or unreadable"
        return 1, (
            f"fl-async: the run failed (status {status!r}, {HISTORY} {wrote}); see the log "
            f"above and {output / SUPERLINK_LOG}"
        )
    stop = str(record.get("stopped-by", ""))
    if stop in FAILED_STOPS:
        detail = " ".join(str(record.get("stop-detail") or "no detail recorded").split())
        return 1, f"fl-async: the run could not make progress ({stop}: {detail}); see {history}"
    return 0, f"fl-async: done ({stop}); results in {output}"


def study_verdict(status: str, study: Path, started: float) -> tuple[int, str]:
    """0 when the study's simulation completed (each run's ending is in its own status, so
    ``started`` is not needed), else 1; with the line to print."""
    if status != COMPLETED:
        return 1, (
            f"fl-async: the study's simulation failed (status {status!r}); its runs' statuses "
            f"say which ended; see {study / SUPERLINK_LOG}"
        )
    return 0, f"fl-async: study done; the runs' results are in their output folders ({study})"


def _read(history: Path) -> dict | None:
    try:
        record = json.loads(history.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
