"""The ServerApp of a study: many runs in one Flower simulation, ``jobs`` at a time.

``fl-async bench`` writes each run as a request to a study folder (``fl_async.app.study_files``);
this ServerApp runs each request as ``server_run.run`` does a whole simulation's run, in a
thread of its own, on a ``RunGrid`` over the one grid: the run's messages carry its node
settings, so one set of Ray actors trains every run's tasks. A run's history depends only on
its seed and the virtual clock, never on what runs beside it, so it is the one its own
simulation would give (wall times aside).

Faults stay per run: a run that raises, or that bench stops (``stop/<id>``), ends with its own
``run-status.json`` (``run_status``) and log while the others go on. The loop wakes every
``POLL`` seconds and ends by itself (``study_files``: closed, owner gone, or idle), writing the
study's ``ended.json`` last: the launcher's sign that the simulation's work is done.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord
from flwr.common.config import parse_config_args
from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async.app import study_files as files
from fl_async.app.config import AppConfig, parse_run_config
from fl_async.app.run_grid import RunGrid, RunStopped, SharedGrid
from fl_async.app.run_status import FAILED, FINISHED, STOPPED, ended, write_run_status
from fl_async.config import NODE_KEYS

POLL = 0.1
"""Seconds between two looks at the study folder and at the runs going."""
RUN_LOG = "run.log"
"""A run's own log lines, in its output-dir."""


def serve(grid: Grid, study: Path, *, clock: Callable[[], float] = time.monotonic) -> int:
    """Run the study's requests until it is closed, its owner is gone or it stays idle; the
    number of runs made."""
    settings = files.read_study(study)
    jobs, owner = int(settings["jobs"]), int(settings["owner-pid"])
    shared = SharedGrid(grid)
    taken: set[str] = set()
    running: dict[str, threading.Thread] = {}
    stopping = threading.Event()
    idle_since = clock()
    while True:
        for request_id in [r for r, thread in running.items() if not thread.is_alive()]:
            del running[request_id]
        if not files.owner_alive(owner):
            stopping.set()  # nobody will read the results: stop every run at its next call
        waiting = [] if stopping.is_set() else files.pending_requests(study, taken)
        for request in waiting[: max(0, jobs - len(running))]:
            taken.add(request.id)
            running[request.id] = _start(shared, study, request, _stopping(stopping, owner))
        if running or waiting:
            idle_since = clock()
        elif stopping.is_set() or files.is_closed(study) or clock() - idle_since > files.IDLE_LIMIT:
            break
        time.sleep(POLL)
    log(logging.INFO, "fl-async: study done: %d runs", len(taken))
    files.write_ended(study, len(taken))  # last: the launcher stops the simulation once it sees it
    return len(taken)


def _stopping(stopping: threading.Event, owner: int) -> Callable[[], bool]:
    """Whether the study is ending: ``stopping`` set, or its owner gone now. The owner is looked
    at on each call, not only at the loop's next wake: a run must stop at its first call after
    the owner dies, before it takes in the replies that its dying simulation sends."""

    def ending() -> bool:
        if not stopping.is_set() and not files.owner_alive(owner):
            stopping.set()
        return stopping.is_set()

    return ending


def _start(
    shared: SharedGrid, study: Path, request: files.Request, ending: Callable[[], bool]
) -> threading.Thread:
    def stop() -> str | None:
        if ending():
            return "the study ended before this run did"
        if files.stop_asked(study, request.id):
            return "stopped by fl-async bench (its wall-clock limit)"
        return None

    thread = threading.Thread(
        target=run_request, args=(shared, request, stop), name=f"fl-async-run-{request.id}"
    )
    thread.start()
    return thread


def run_request(shared: SharedGrid, request: files.Request, stop: Callable[[], str | None]) -> str:
    """Make the run of ``request`` on the study's ``shared`` grid (its messages carrying its
    node settings), its log lines in its ``run.log``, its ending in its ``run-status.json``;
    the state it ended in."""
    from fl_async.app.server_run import run  # torch and the strategies, after Flower's start

    output = Path(request.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    handler = _thread_log(output / RUN_LOG)
    grid = None
    try:
        config = request_config(request)
        grid = RunGrid(shared, node_settings(config), stop)
        run(grid, config)
        return FINISHED  # server_run.run wrote the status with the run's own stop
    except RunStopped as reason:
        return _ended(output, STOPPED, str(reason))
    except Exception as error:  # noqa: BLE001 (a run's fault must not end the others)
        log(logging.ERROR, "fl-async: the run failed:\n%s", traceback.format_exc())
        return _ended(output, FAILED, f"{type(error).__name__}: {error}")
    finally:
        if grid is not None:
            grid.close()
        logging.getLogger("flwr").removeHandler(handler)
        handler.close()


def request_config(request: files.Request) -> AppConfig:
    """The run config of ``request`` as Flower would give it to the run's own simulation: its
    text parsed as ``flwr run --run-config`` parses it, with the launcher's ``num-nodes`` and
    ``output-dir`` over it, every other key at its default."""
    overrides: dict[str, Any] = parse_config_args([request.run_config])
    overrides.update({"num-nodes": request.nodes, "output-dir": request.output_dir})
    return parse_run_config(overrides)


def node_settings(config: AppConfig) -> ConfigRecord:
    """The run's node keys, as the run's messages carry them (``RUN_SETTINGS_KEY``)."""
    return ConfigRecord({key: config.values[key] for key in NODE_KEYS})


def _ended(output: Path, state: str, reason: str) -> str:
    log(logging.INFO, "fl-async: the run %s: %s", state, reason)
    write_run_status(output, ended(state, reason))
    return state


def _thread_log(path: Path) -> logging.Handler:
    """A handler on Flower's logger that writes this thread's records to ``path``."""
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s: %(message)s"))
    name = threading.current_thread().name
    handler.addFilter(lambda record: record.threadName == name)
    logging.getLogger("flwr").addHandler(handler)
    return handler
