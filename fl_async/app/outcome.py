"""The launcher's verdict on a finished ``flwr run``: its exit code and the line saying why.

The verdict comes from the file the ServerApp writes last: a run's ``run-status.json``
(``run_status``), a study's ``ended.json`` (``study_files``). Without it the ServerApp did not
end by itself (it crashed, or Flower stopped it), whatever the log said; the line then quotes
the run's status as ``flwr ls`` gave it.
"""

from __future__ import annotations

from pathlib import Path

from fl_async.app.run_status import FINISHED, RUN_STATUS, RunStatus, read_run_status
from fl_async.app.study_files import ENDED, read_ended
from fl_async.strategies import FAILED_STOPS
from fl_async.validation import InvalidArgument

SUPERLINK_LOG = "superlink.log"


def verdict(output: Path, flower: str | None) -> tuple[int, str]:
    """0 when ``output``'s ``run-status.json`` says the run finished and did not stop for want
    of progress (``FAILED_STOPS``), else 1; with the line to print. ``flower`` is the run's
    status as ``flwr ls`` gave it (None: not asked)."""
    try:
        status = read_run_status(output)
    except InvalidArgument as error:
        return 1, f"fl-async: the run failed: {_one_line(error)}"
    if status is None:
        return 1, (
            f"fl-async: the run failed: it wrote no {RUN_STATUS} (Flower's status "
            f"{flower!r}); see the log above and {output / SUPERLINK_LOG}"
        )
    if status.state != FINISHED:
        return 1, f"fl-async: the run {status.state}: {status.reason}; see the log above"
    if status.stopped_by in FAILED_STOPS:
        detail = _one_line(status.stop_detail or "no detail recorded")
        return 1, (
            f"fl-async: the run could not make progress ({status.stopped_by}: {detail}); "
            f"see {status.history}"
        )
    return 0, f"fl-async: done ({status.stopped_by}){_counts(status)}; results in {output}"


def study_verdict(study: Path, flower: str | None) -> tuple[int, str]:
    """0 when the study's ServerApp wrote its ``ended.json`` (each run's ending is in its own
    status), else 1; with the line to print."""
    try:
        runs = read_ended(study)
    except InvalidArgument as error:
        return 1, f"fl-async: the study's simulation failed: {_one_line(error)}"
    if runs is None:
        return 1, (
            f"fl-async: the study's simulation failed: its ServerApp wrote no {ENDED} (Flower's "
            f"status {flower!r}); its runs' statuses say which ended; see {study / SUPERLINK_LOG}"
        )
    return 0, f"fl-async: study done: {runs} runs; their results are in their output folders"


def _counts(status: RunStatus) -> str:
    """What the status counts, as the ServerApp's last log line says it (that line may come
    after ``flwr run`` is stopped)."""
    accuracy, updates, virtual = (
        status.counts.get(key) for key in ("final-accuracy", "num-updates", "virtual-time")
    )
    said = "" if accuracy is None else f"final accuracy {100 * accuracy:.1f}%"
    if updates is not None:
        said += (" after " if said else "") + f"{updates} updates"
    if virtual is not None:
        said += (", " if said else "") + f"virtual time {virtual:.1f} s"
    return f": {said}" if said else ""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())
