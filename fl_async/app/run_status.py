"""A run's ``run-status.json``: what became of it, written last and atomically into its
output-dir, and read by the launcher (its exit code) and by ``fl-async bench`` (done or failed).

A run that ended by itself writes ``state = "finished"`` with its outcome: ``stopped-by``,
``stop-detail``, its counts and the paths of what it wrote. A run that raised writes ``failed``
and one that was stopped from outside (a study's wall-clock limit) ``stopped``, each with a
``reason``. A run killed outright writes nothing: its readers say so. This module imports
neither torch nor Flower.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_async.files import read_json, write_atomically
from fl_async.validation import InvalidArgument

RUN_STATUS = "run-status.json"
FINISHED, FAILED, STOPPED = "finished", "failed", "stopped"
"""A run's ``state``: it ran to its own end (a budget, the target, or a stop of ``FAILED_STOPS``),
raised, or was stopped from outside (its wall-clock limit, the study's end)."""
STATES = (FINISHED, FAILED, STOPPED)
_FIX = "run it again (the file is the run's own, written last)"


@dataclass(frozen=True)
class RunStatus:
    """What became of a run, as its ``run-status.json`` says."""

    state: str
    stopped_by: str = ""
    """Why a finished run ended (``history.json``'s ``stopped-by``)."""
    stop_detail: str = ""
    reason: str = ""
    """Why a run failed or was stopped (a ``failed`` or ``stopped`` state)."""
    counts: dict[str, Any] = field(default_factory=dict)
    """``num-updates``, ``server-steps``, ``virtual-time``, ``wall-time``, ``final-accuracy``."""
    history: str | None = None
    """The path of the run's ``history.json`` (a finished run)."""
    plots: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The status as written to the file."""
        if self.state != FINISHED:
            return {"state": self.state, "reason": self.reason}
        return {
            "state": self.state,
            "stopped-by": self.stopped_by,
            "stop-detail": self.stop_detail,
            **self.counts,
            "history": self.history,
            "plots": list(self.plots),
        }


COUNTS = ("num-updates", "server-steps", "virtual-time", "wall-time", "final-accuracy")
"""The counts a finished status copies from the run's history."""


def finished(history: dict[str, Any], paths: list[Path]) -> RunStatus:
    """The status of a run that ended by itself: its ``history`` and the files it wrote
    (``history.json`` first, then the plots)."""
    return RunStatus(
        FINISHED,
        stopped_by=str(history["stopped-by"]),
        stop_detail=str(history.get("stop-detail") or ""),
        counts={key: history.get(key) for key in COUNTS},
        history=str(paths[0]),
        plots=tuple(str(path) for path in paths[1:]),
    )


def ended(state: str, reason: str) -> RunStatus:
    """The status of a run that failed or was stopped, ``reason`` on one line."""
    return RunStatus(state, reason=" ".join(reason.split()))


def write_run_status(output_dir: Path, status: RunStatus) -> Path:
    """Write ``status`` to ``output_dir``'s ``run-status.json`` in one step; its path."""
    return write_atomically(output_dir / RUN_STATUS, json.dumps(status.as_json(), indent=1) + "\n")


def read_run_status(output_dir: Path) -> RunStatus | None:
    """The run's status, None while it has none; ``InvalidArgument`` (one line naming the file)
    when the file is there but is not a run status."""
    path = output_dir / RUN_STATUS
    if not path.exists():
        return None
    value = read_json(path, "run status", keys=("state",), fix=_FIX)
    state = value["state"]
    if state not in STATES:
        raise InvalidArgument(f"{path} is not a run status (state {state!r}); {_FIX}")
    if state != FINISHED:
        return ended(state, str(value.get("reason") or "no reason recorded"))
    missing = [key for key in ("stopped-by", "history") if not isinstance(value.get(key), str)]
    if missing:
        raise InvalidArgument(f"{path} is not a run status (no {', '.join(missing)}); {_FIX}")
    for key in COUNTS:
        count = value.get(key)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int | float)):
            raise InvalidArgument(f"{path} is not a run status ({key} = {count!r}); {_FIX}")
    return RunStatus(
        FINISHED,
        stopped_by=value["stopped-by"],
        stop_detail=str(value.get("stop-detail") or ""),
        counts={key: value.get(key) for key in COUNTS},
        history=value["history"],
        plots=tuple(str(p) for p in value.get("plots") or ()),
    )


def clear_run_status(output_dir: Path) -> None:
    """Remove an earlier run's status from ``output_dir``: a status read later is this run's."""
    (output_dir / RUN_STATUS).unlink(missing_ok=True)
