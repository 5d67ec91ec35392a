"""A suite's settings and its runs: one ``python -m fl_async.app`` (the launcher) per strategy,
split and seed (``fl_async.bench.schedule`` runs them, K at a time).

Layout of a suite folder::

    <out>/suite.json                          the settings, the planned runs, one entry per call
    <out>/<split>/<strategy>-seed<seed>/      the run's output-dir: history.json, plots, logs
        bench-run.json                        its run config, command, exit code and wall time

A run whose ``history.json`` exists is done and skipped, so an interrupted suite resumes where
it stopped; so is a run that a records folder given as ``records`` holds, made with the same run
config (a suite run over several machines or sessions, its finished runs committed as
records). A run whose folder holds a different run config is an error: the suite folder then
belongs to other settings.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fl_async.app.config import parse_run_config
from fl_async.app.results import HISTORY, STARTED_AT, read_history
from fl_async.app.run_status import FINISHED, clear_run_status, read_run_status
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.scenarios import (
    BASELINE,
    UNLIMITED_ROUNDS,
    Scenario,
    Variant,
    run_config,
    to_run_config_text,
)
from fl_async.files import read_json, write_atomically
from fl_async.validation import InvalidArgument, check_int

if TYPE_CHECKING:
    from fl_async.bench.engines import Engine

SUITE_FILE = "suite.json"
RUN_FILE = "bench-run.json"
RUN_LOG = "run.log"


class SuiteError(InvalidArgument):
    """Settings that cannot run (or that contradict the runs already in the suite folder)."""


@dataclass(frozen=True)
class SuiteSpec:
    """What a suite runs; each (split, seed, strategy) is one run."""

    scenario: Scenario
    strategies: tuple[str, ...]
    seeds: tuple[int, ...]
    dataset: str
    nodes: int
    rounds: int
    max_virtual_time: float | None
    extra: dict[str, object] = field(default_factory=dict)
    grid: int = DEFAULT_GRID
    """G: every run is compared at G equally spaced virtual times over its budget."""
    variants: dict[str, Variant] = field(default_factory=dict)
    """Named presets with overrides of their own; their names are in ``strategies`` too."""

    def __post_init__(self) -> None:
        check_int("grid", self.grid, minimum=2)
        if self.max_virtual_time is None and BASELINE not in self.strategies:
            raise SuiteError(
                f"without --max-virtual-time the budget is the virtual time of {self.rounds} "
                f"SSGD rounds: add {BASELINE!r} to --strategies or pass --max-virtual-time"
            )

    def ordered_strategies(self) -> list[str]:
        """The baseline first: the other runs of a seed take their budget from it."""
        return sorted(self.strategies, key=lambda name: name != BASELINE)

    def budget_from_baseline(self) -> bool:
        """Whether the virtual-time budget comes from SSGD's ``rounds`` rounds."""
        return self.max_virtual_time is None

    def config(self, strategy: str, split: str, seed: int, budget: float | None) -> dict:
        """The run config of one run; ``budget`` is the virtual-time budget (None: rounds).

        A run with a budget records its grid (``eval-grid``); SSGD setting the budget cannot
        (T is unknown until it ends): the report derives its grid from its evaluations.
        """
        rounds = self.rounds if budget is None else UNLIMITED_ROUNDS
        extra = self.extra
        if extra.get("tracking.backend"):  # each run its own TensorBoard folder or MLflow run
            extra = {**extra, "tracking.run-name": f"{split}/{strategy}-seed{seed}"}
        variant = self.variants.get(strategy)
        if variant is not None:
            strategy, extra = variant.preset, {**extra, **variant.overrides}
        return run_config(
            strategy=strategy,
            seed=seed,
            scenario=self.scenario,
            split=split,
            nodes=self.nodes,
            dataset=self.dataset,
            num_rounds=rounds,
            max_virtual_time=budget,
            extra=extra,
            eval_grid=None if budget is None else self.grid,
        )

    def as_json(self) -> dict[str, object]:
        """The settings as written to ``suite.json``."""
        return {
            "scenario": self.scenario.name,
            "description": self.scenario.description,
            "splits": list(self.scenario.splits),
            "correlate": self.scenario.correlate,
            "clock.sigma": self.scenario.sigma,
            "strategies": list(self.strategies),
            "seeds": list(self.seeds),
            "dataset": self.dataset,
            "nodes": self.nodes,
            "rounds": self.rounds,
            "max-virtual-time": self.max_virtual_time,
            "grid": self.grid,
            "run-config": self.extra,
            **(
                {"variants": {name: v.as_json() for name, v in self.variants.items()}}
                if self.variants
                else {}
            ),
        }


def run_dir(out: Path, split: str, strategy: str, seed: int) -> Path:
    """The output-dir of one run inside the suite folder."""
    return out / split / f"{strategy}-seed{seed}"


def is_done(directory: Path) -> bool:
    """A run is done when its ``history.json`` exists (the app writes it atomically, last)."""
    return (directory / HISTORY).is_file()


def finished_history(directory: Path) -> Path | None:
    """The ``history.json`` that the run's ``run-status.json`` names, when it says the run
    finished and the file is there; None for no status, a damaged one, or a run that failed or
    was stopped."""
    try:
        status = read_run_status(directory)
    except InvalidArgument:
        return None
    if status is None or status.state != FINISHED or status.history is None:
        return None
    history = Path(status.history)
    return history if history.is_file() else None


def baseline_budget(directory: Path) -> float:
    """The virtual time at which the SSGD run in ``directory`` ended."""
    history = read_history(directory / HISTORY)
    return float(history["virtual-time"])


def check_existing(directory: Path, config: dict) -> None:
    """Raise SuiteError if ``directory`` holds a run made with another run config."""
    recorded = directory / RUN_FILE
    if not recorded.is_file():
        return
    # output-dir is left out of the comparison: a suite folder may be moved; and the tracking
    # keys, which change where a run is logged, not what it computes.
    before = read_json(recorded, "run file").get("run-config")
    wanted = _compared(json.loads(json.dumps(config)))
    if before is not None:
        before = _compared(before)
    if before is not None and before != wanted:
        changed = sorted(k for k in set(before) | set(wanted) if before.get(k) != wanted.get(k))
        hint = "resume with the same options or choose another --out"
        if "eval-grid" in changed and "eval-grid" not in before:
            hint = (
                "it was made before the evaluation grid (eval-grid): choose another --out to "
                "run the suite again (--report-only still reports this folder)"
            )
        raise SuiteError(
            f"{directory} was run with other settings ({', '.join(changed)} differ); {hint}"
        )


def _compared(config: dict) -> dict:
    return {
        key: value
        for key, value in config.items()
        if key != "output-dir" and not key.startswith("tracking.")
    }


def launcher_command(
    config: dict, *, nodes: int, actors: int, app_dir: Path, ray_address: str | None = None
) -> list[str]:
    """``python -m fl_async.app`` for one run, with this Python: ``actors`` ClientApps at once,
    or on the Ray cluster at ``ray_address``, whose machines set how many."""
    where = ["--ray-address", ray_address] if ray_address else ["--actors", str(actors)]
    return [
        sys.executable,
        "-m",
        "fl_async.app",
        "--app",
        str(app_dir),
        "--nodes",
        str(nodes),
        *where,
        "--run-config",
        to_run_config_text(config),
    ]


def default_app_dir() -> Path:
    """The Flower App directory: the repository holding ``fl_async``, else the working directory."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else Path.cwd()


@dataclass
class SuiteOutcome:
    """What one call of ``run_suite`` did."""

    ran: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    held: list[Path] = field(default_factory=list)
    """Of the skipped runs, those skipped because the records folder holds them."""
    failed: list[Path] = field(default_factory=list)
    blocked: list[Path] = field(default_factory=list)
    """Runs not started because their seed's SSGD run (the budget) failed."""


def validate(spec: SuiteSpec) -> None:
    """Check every planned run config before anything starts (SuiteError names the bad value)."""
    for split in spec.scenario.splits:
        for strategy in spec.strategies:
            config = spec.config(strategy, split, spec.seeds[0], spec.max_virtual_time or 1.0)
            try:
                parse_run_config(config)
            except ValueError as error:
                raise SuiteError(str(error)) from error


def run_one(config: dict, directory: Path, engine: Engine, provenance: dict) -> int:
    """Make one run of the suite into ``directory`` with ``engine``; its command, provenance,
    exit code and wall time in ``bench-run.json``; its exit code (1 when its ``run-status.json``
    does not say it finished with a history)."""
    directory.mkdir(parents=True, exist_ok=True)
    clear_run_status(directory)  # an earlier attempt's
    record = {
        "run-config": config,
        "command": engine.command(config),
        "provenance": provenance,
        "started": time.time(),
    }
    _write_json(directory / RUN_FILE, record)
    started = time.monotonic()
    status = engine.run(config, directory, directory / RUN_LOG)
    if status == 0 and finished_history(directory) is None:
        status = 1  # the launcher said yes but its status says no history: count it as failed
    record.update({"exit-code": status, "wall-seconds": round(time.monotonic() - started, 1)})
    _write_json(directory / RUN_FILE, record)
    return status


def with_provenance(history: dict, directory: Path) -> dict:
    """``history`` with the ``provenance`` of its run's ``bench-run.json``, where it has one."""
    found = provenance_of(directory)
    return history if found is None else {**history, "provenance": found}


def provenance_of(directory: Path) -> dict | None:
    """The provenance ``bench-run.json`` of a run holds (None: none, or made before it was)."""
    path = directory / RUN_FILE
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def record_call(out: Path, spec: SuiteSpec) -> None:
    """Add this call (time, command line, settings) to the suite folder's ``suite.json``."""
    path = out / SUITE_FILE
    suite = read_json(path, "suite file", keys=("calls",)) if path.is_file() else {"calls": []}
    suite["calls"].append({"at": time.strftime(STARTED_AT), "argv": sys.argv, **spec.as_json()})
    suite["latest"] = spec.as_json()
    _write_json(path, suite)


def _write_json(path: Path, value: object) -> None:
    write_atomically(path, json.dumps(value, indent=1) + "\n")


def planned_runs(spec: SuiteSpec, out: Path) -> Sequence[Path]:
    """Every run directory of the suite, in the order ``run_suite`` visits them."""
    return [
        run_dir(out, split, strategy, seed)
        for split in spec.scenario.splits
        for seed in spec.seeds
        for strategy in spec.ordered_strategies()
    ]
