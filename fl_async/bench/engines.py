"""How a suite's runs are made: many in one Flower simulation (``Study``, the default), or each
in a simulation of its own (``Separate``).

Both give a run the same history (wall times aside): a run depends only on its seed and the
virtual clock. A study pays Flower's and Ray's start-up once and keeps the actors busy with
several runs' tasks, where one run alone leaves them waiting on its next reply.

``Study`` starts one ``python -m fl_async.app --study DIR`` per node count (runs with different
node counts need different simulations) the first time a run needs it, hands it each run as a
request (``fl_async.app.study_files``) and waits for the run's ``run-status.json``. Every wait
is bounded: a look every ``POLL`` seconds, the run's wall-clock limit (``--run-timeout``), and
the simulation's own end, which fails every run still waiting on it.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fl_async.app import study_files as files
from fl_async.app.run_status import (
    FINISHED,
    STOPPED,
    RunStatus,
    clear_run_status,
    read_run_status,
)
from fl_async.bench.launch import STOP_GRACE, TIMED_OUT, Launch, Subprocesses
from fl_async.bench.runner import launcher_command
from fl_async.bench.scenarios import to_run_config_text
from fl_async.strategies import FAILED_STOPS
from fl_async.validation import InvalidArgument

POLL = 0.2
"""Seconds between two looks at a run's status."""
STUDIES = ".studies"
"""The folder of a suite folder that holds its study folders (not a split: no run is there)."""
ENGINES = ("study", "separate")


class Engine(Protocol):
    """Makes one run of a suite at a time per call, from several threads at once."""

    name: str
    runs_at_a_time: int

    def command(self, config: dict) -> list[str]:
        """The command that makes (or made) the run of ``config``, for its record."""

    def run(self, config: dict, directory: Path, log: Path) -> int:
        """Make the run of ``config`` into ``directory``; the launcher's exit code for it."""

    def stop_all(self) -> None:
        """Stop every run still going (an interrupt)."""

    def close(self) -> None:
        """Release what the engine started, once no run is going."""


@dataclass
class Separate:
    """Each run its own ``python -m fl_async.app`` (``launch`` runs the command)."""

    launch: Launch
    app_dir: Path
    actors: int
    ray_address: str | None = None
    runs_at_a_time: int = 1
    name: str = "separate"

    def command(self, config: dict) -> list[str]:
        """``python -m fl_async.app`` for this one run."""
        return launcher_command(
            config,
            nodes=int(config["num-nodes"]),
            actors=self.actors,
            app_dir=self.app_dir,
            ray_address=self.ray_address,
        )

    def run(self, config: dict, directory: Path, log: Path) -> int:
        """Run the launcher for this run, its output in ``log``."""
        return self.launch(self.command(config), log)

    def stop_all(self) -> None:
        """SIGINT to every launcher still going (then SIGKILL after a grace)."""
        self.launch.stop_all()

    def close(self) -> None:
        """Nothing outlives a run of its own."""


@dataclass
class _Simulation:
    """One study simulation: its folder and the thread that waits on its launcher."""

    folder: Path
    thread: threading.Thread
    exit_code: list[int] = field(default_factory=list)


class Study:
    """Many runs in one simulation per node count, ``runs_at_a_time`` at once; a run is
    stopped after ``timeout`` seconds of wall time (None: no limit)."""

    name = "study"

    def __init__(
        self,
        out: Path,
        *,
        app_dir: Path,
        actors: int,
        runs_at_a_time: int,
        ray_address: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.out = out
        self.app_dir = app_dir
        self.actors = actors
        self.runs_at_a_time = runs_at_a_time
        self.ray_address = ray_address
        self.timeout = timeout
        self.launch = Subprocesses()
        self._simulations: dict[int, _Simulation] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def command(self, config: dict) -> list[str]:
        """The launcher of the simulation that makes runs of ``config``'s node count (started
        here if none is going)."""
        return self._command(self._simulation(int(config["num-nodes"])).folder)

    def run(self, config: dict, directory: Path, log: Path) -> int:
        """Hand the run to its simulation and wait for its status (bounded)."""
        nodes = int(config["num-nodes"])
        simulation = self._simulation(nodes)
        with self._lock:
            request_id = f"{next(self._ids):06d}"
        clear_run_status(directory)  # an earlier attempt's
        text = to_run_config_text(config)
        output = str(Path(str(config["output-dir"])).resolve())
        files.submit(simulation.folder, files.Request(request_id, text, output, nodes))
        return self._wait(simulation, request_id, directory, log)

    def _wait(self, simulation: _Simulation, request_id: str, directory: Path, log: Path) -> int:
        started, asked = time.monotonic(), None
        while True:
            try:
                status = read_run_status(directory)
            except InvalidArgument as error:  # written once, whole: it will not mend
                _note(log, str(error))
                return 1
            if status is not None:
                return _exit_code(status, timed_out=asked is not None)
            if not simulation.thread.is_alive():
                ended = simulation.exit_code or "none yet"
                where = simulation.folder / "study.log"
                _note(
                    log, f"the study's simulation ended (exit {ended}) before this run; see {where}"
                )
                return 1
            waited = time.monotonic() - started
            if asked is None and self.timeout is not None and waited > self.timeout:
                files.ask_to_stop(simulation.folder, request_id)
                _note(log, f"stopped after {self.timeout} s (--run-timeout)")
                asked = time.monotonic()
            if asked is not None and time.monotonic() - asked > STOP_GRACE:
                return TIMED_OUT  # it did not stop in time; its slot may stay taken
            time.sleep(POLL)

    def _folder(self, nodes: int) -> Path:
        return self.out / STUDIES / f"{time.strftime('%Y%m%d-%H%M%S')}-n{nodes}"

    def _command(self, folder: Path) -> list[str]:
        where = ["--ray-address", self.ray_address] if self.ray_address else []
        actors = [] if self.ray_address else ["--actors", str(self.actors)]
        return [*_launcher(self.app_dir), "--study", str(folder), *where, *actors]

    def _simulation(self, nodes: int) -> _Simulation:
        """The simulation for ``nodes`` nodes, started the first time (and again after one
        that ended)."""
        with self._lock:
            simulation = self._simulations.get(nodes)
            if simulation is None or not simulation.thread.is_alive():
                simulation = self._start(nodes)
                self._simulations[nodes] = simulation
            return simulation

    def _start(self, nodes: int) -> _Simulation:
        folder = self._folder(nodes)
        while folder.exists():  # two starts within a second
            folder = folder.with_name(folder.name + "x")
        files.write_study(folder, jobs=self.runs_at_a_time, nodes=nodes, owner_pid=os.getpid())
        exit_code: list[int] = []
        command = self._command(folder)

        def launch() -> None:
            exit_code.append(self.launch(command, folder / "study.log"))

        thread = threading.Thread(target=launch, name=f"fl-async-study-n{nodes}", daemon=True)
        thread.start()
        return _Simulation(folder, thread, exit_code)

    def stop_all(self) -> None:
        """Stop every simulation (SIGINT, then SIGKILL after a grace): runs with checkpoints
        resume from them on the next call."""
        self.launch.stop_all()

    def close(self) -> None:
        """Tell every simulation no run will follow and wait (bounded) for it to end."""
        for simulation in self._simulations.values():
            files.close(simulation.folder)
        for simulation in self._simulations.values():
            simulation.thread.join(timeout=STOP_GRACE)
        if any(s.thread.is_alive() for s in self._simulations.values()):
            self.launch.stop_all()


def _exit_code(status: RunStatus, *, timed_out: bool) -> int:
    """The launcher's exit code for a run that ended with ``status``."""
    if status.state == FINISHED:
        return 1 if status.stopped_by in FAILED_STOPS else 0
    if status.state == STOPPED and timed_out:
        return TIMED_OUT
    return 1


def _note(log: Path, line: str) -> None:
    with log.open("a") as stream:
        stream.write(f"\nfl-async bench: {line}\n")


def _launcher(app_dir: Path) -> list[str]:
    return [sys.executable, "-m", "fl_async.app", "--app", str(app_dir)]
