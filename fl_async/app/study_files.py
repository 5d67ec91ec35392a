"""A study folder: how ``fl-async bench`` hands many runs to one Flower simulation, and how that
simulation says what became of each run.

Layout (every file is written atomically, so a reader never sees half of one)::

    <study>/study.json            {"jobs": K, "nodes": N, "owner-pid": PID}
    <study>/requests/<id>.json    one run: its run-config text (as flwr run takes it), its
                                  output-dir and its node count
    <study>/stop/<id>             asks the simulation to stop that run (its wall-clock limit)
    <study>/closed                no more requests: the simulation ends once its runs have
    <study>/ended.json            the simulation's ServerApp has ended: {"runs": how many it made}
    <output-dir>/run-status.json  what became of a run (``fl_async.app.run_status``)

The simulation's ServerApp (``fl_async.app.study_server``) takes the requests in the order of
their ids, ``jobs`` at a time. It stops taking new ones once ``closed`` exists, once the
process ``owner-pid`` is gone, or after ``IDLE_LIMIT`` seconds without a request, so it always
ends by itself. This module imports neither torch nor Flower: the launcher and bench use it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fl_async.files import read_json, write_atomically
from fl_async.validation import InvalidArgument

STUDY_FILE = "study.json"
REQUESTS = "requests"
STOPS = "stop"
CLOSED = "closed"
ENDED = "ended.json"
IDLE_LIMIT = 600.0
"""Seconds a study simulation waits for a request with nothing running before it ends."""


@dataclass(frozen=True)
class Request:
    """One run a study is asked to make."""

    id: str
    run_config: str
    """The run config as ``flwr run --run-config`` text (parsed as Flower parses it)."""
    output_dir: str
    nodes: int

    def as_json(self) -> dict[str, Any]:
        """The request as written to its file."""
        return {
            "id": self.id,
            "run-config": self.run_config,
            "output-dir": self.output_dir,
            "nodes": self.nodes,
        }


def write_study(study: Path, *, jobs: int, nodes: int, owner_pid: int) -> None:
    """Create the study folder ``study`` for ``nodes`` virtual nodes, ``jobs`` runs at a time."""
    (study / REQUESTS).mkdir(parents=True, exist_ok=True)
    (study / STOPS).mkdir(exist_ok=True)
    settings = {"jobs": jobs, "nodes": nodes, "owner-pid": owner_pid}
    write_atomically(study / STUDY_FILE, json.dumps(settings) + "\n")


def read_study(study: Path) -> dict[str, Any]:
    """The study's settings (``jobs``, ``nodes``, ``owner-pid``)."""
    return read_json(study / STUDY_FILE, "study file", keys=("jobs", "nodes", "owner-pid"))


def submit(study: Path, request: Request) -> Path:
    """Hand ``request`` to the study's simulation; the request file."""
    return write_atomically(study / REQUESTS / f"{request.id}.json", json.dumps(request.as_json()))


def pending_requests(study: Path, taken: set[str]) -> list[Request]:
    """The study's requests not in ``taken``, in the order of their ids."""
    found = []
    for path in sorted((study / REQUESTS).glob("*.json")):
        if path.stem in taken:
            continue
        value = read_json(path, "study request", keys=("id", "run-config", "output-dir", "nodes"))
        found.append(
            Request(
                id=str(value["id"]),
                run_config=str(value["run-config"]),
                output_dir=str(value["output-dir"]),
                nodes=int(value["nodes"]),
            )
        )
    return found


def ask_to_stop(study: Path, request_id: str) -> None:
    """Ask the study's simulation to stop the run of ``request_id``."""
    write_atomically(study / STOPS / request_id, "")


def stop_asked(study: Path, request_id: str) -> bool:
    """Whether the run of ``request_id`` was asked to stop."""
    return (study / STOPS / request_id).exists()


def close(study: Path) -> None:
    """Tell the study's simulation that no request will follow."""
    write_atomically(study / CLOSED, "")


def is_closed(study: Path) -> bool:
    """Whether the study was closed."""
    return (study / CLOSED).exists()


def owner_alive(pid: int) -> bool:
    """Whether the process that owns the study still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


def write_ended(study: Path, runs: int) -> Path:
    """Say that the study's ServerApp has ended, having made ``runs`` runs (its last act)."""
    return write_atomically(study / ENDED, json.dumps({"runs": runs}) + "\n")


def read_ended(study: Path) -> int | None:
    """How many runs the study's ServerApp made, None while it has not ended;
    ``InvalidArgument`` when the file is there but damaged."""
    path = study / ENDED
    if not path.exists():
        return None
    runs = read_json(path, "study's end", keys=("runs",))["runs"]
    if not isinstance(runs, int):
        raise InvalidArgument(f"{path} is not a study's end (runs = {runs!r})")
    return runs
