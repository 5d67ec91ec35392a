"""Run a suite's runs that are not done yet, ``jobs`` at a time: by default many in one Flower
simulation (``fl_async.bench.engines.Study``), or each in its own (``Separate``).

Runs start in the order of ``planned_runs`` (split by split, seed by seed, SSGD first), as soon
as a slot is free and their budget is known: when SSGD's ``rounds`` set the budget, a run waits
for its seed's SSGD run, and is not run (blocked) when that one failed. With one job at a time
this is the order of a sequential suite, and a run's record does not depend on what ran beside
it (each run is seeded and reads only the virtual clock), so ``--jobs`` changes only wall times.
A run that the records folder ``records`` holds, made with the same run config, is skipped too,
and its seed's budget read from SSGD's record. Every wait is bounded: the loop wakes every
``POLL`` seconds, and an interrupt stops every run still going (``Engine.stop_all``) before it
returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from fl_async.app.results import read_history
from fl_async.bench.engines import ENGINES, Engine, Separate, Study
from fl_async.bench.export import is_records_folder
from fl_async.bench.launch import STOP_GRACE, Launch, Subprocesses, terminate_as_interrupt
from fl_async.bench.progress import Progress, RunLabel
from fl_async.bench.provenance import run_provenance
from fl_async.bench.records import (
    Record,
    Records,
    ended_by_its_rule,
    load_records,
    made_with,
    summary,
)
from fl_async.bench.runner import (
    BASELINE,
    RUN_LOG,
    SuiteOutcome,
    SuiteSpec,
    baseline_budget,
    check_existing,
    default_app_dir,
    finished_history,
    is_done,
    record_call,
    run_dir,
    run_one,
    validate,
)
from fl_async.validation import InvalidArgument, check_choice, check_int

POLL = 1.0
"""Seconds between two looks at the runs going (and at an interrupt)."""


@dataclass(frozen=True)
class Planned:
    """One run of the suite: its label and its folder."""

    label: RunLabel
    directory: Path


def run_suite(
    spec: SuiteSpec,
    out: Path,
    *,
    actors: int = 2,
    ray_address: str | None = None,
    app_dir: Path | None = None,
    launch: Launch | None = None,
    engine: str = "study",
    run_timeout: float | None = None,
    jobs: int = 1,
    records: Path | None = None,
    echo: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> SuiteOutcome:
    """Run every planned run that is not done yet, ``jobs`` at once (with ``actors``
    ClientApps, or on the Ray cluster at ``ray_address``), printing the progress through
    ``echo``: by ``engine``, "study" (one simulation per node count) or "separate" (each run
    by ``launch``, default ``Subprocesses``; a ``launch`` given means "separate"). A run the
    records folder ``records`` holds (same run config) counts as done."""
    check_int("--jobs", jobs, minimum=1)
    check_choice("--engine", engine, ENGINES)
    validate(spec)
    held = held_records(records)
    out.mkdir(parents=True, exist_ok=True)
    record_call(out, spec)
    where = {"app_dir": app_dir or default_app_dir(), "actors": actors, "ray_address": ray_address}
    if launch is not None or engine == "separate":
        launch = launch or Subprocesses(timeout=run_timeout)
        made: Engine = Separate(launch, **where, runs_at_a_time=jobs)
    else:
        made = Study(out, **where, runs_at_a_time=jobs, timeout=run_timeout)
    plan = _plan(spec, out)
    todo = [p for p in plan if not is_done(p.directory) and _record_of(held, p.label) is None]
    progress = Progress(len(todo), jobs, echo, clock)
    provenance = run_provenance(
        engine=made.name, runs_at_a_time=jobs, actors=None if ray_address else actors
    )

    def start(planned: Planned, config: dict) -> int:
        return run_one(config, planned.directory, made, provenance)

    with terminate_as_interrupt():
        try:
            return _Loop(spec, out, plan, jobs, made, progress, held).run(start)
        finally:
            made.close()


def _plan(spec: SuiteSpec, out: Path) -> list[Planned]:
    """Every run of the suite, in the order a sequential suite takes."""
    return [
        Planned(RunLabel(split, seed, strategy), run_dir(out, split, strategy, seed))
        for split in spec.scenario.splits
        for seed in spec.seeds
        for strategy in spec.ordered_strategies()
    ]


def held_records(records: Path | None) -> dict[str, Records]:
    """The records of the records folder ``records`` (none when not given); InvalidArgument
    when it is not a records folder."""
    if records is None:
        return {}
    if not is_records_folder(records):
        raise InvalidArgument(
            f"--records {records}: not a records folder (made by --export DIR); "
            "leave --records out for a suite with no committed runs yet"
        )
    return load_records(records)


def _record_of(held: dict[str, Records], label: RunLabel) -> Record | None:
    return held.get(label.split, {}).get(label.strategy, {}).get(label.seed)


class _Loop:
    """The state of one call of ``run_suite``: what waits, what runs, what ended."""

    def __init__(
        self,
        spec: SuiteSpec,
        out: Path,
        plan: list[Planned],
        jobs: int,
        engine: Engine,
        progress: Progress,
        held: dict[str, Records],
    ) -> None:
        self.spec = spec
        self.held = held
        """The records folder's records: split -> strategy -> seed -> record."""
        self.out = out
        self.budgets: dict[Path, float] = {}
        """SSGD's final virtual time by its folder, read once."""
        self.configs: dict[Path, dict] = {}
        """The run config of each pending run whose budget is known (checked against its folder)."""
        self.pending = list(plan)
        self.jobs = jobs
        self.engine = engine
        self.progress = progress
        self.running: dict[Future, Planned] = {}
        self.outcome = SuiteOutcome()

    def run(self, start: Callable[[Planned, dict], int]) -> SuiteOutcome:
        """Start what can start, wait (bounded) for a run to end, until nothing is left."""
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="bench-run")
        try:
            while self.pending or self.running:
                self._start_ready(pool, start)
                if not self.running:  # what still waits has no SSGD run to come: never starts
                    self._block(list(self.pending))
                if self.running:
                    ended, _ = wait(self.running, timeout=POLL, return_when=FIRST_COMPLETED)
                    for future in ended:
                        self._ended(future)
        finally:
            if self.running:  # an interrupt, or a folder of other settings: stop what runs
                self.engine.stop_all()
                wait(self.running, timeout=2 * STOP_GRACE)
            pool.shutdown(wait=False, cancel_futures=True)
        return self.outcome

    def _start_ready(self, pool: ThreadPoolExecutor, start: Callable[[Planned, dict], int]) -> None:
        """Settle every pending run that can be settled: done (skipped), blocked, or started
        while a slot is free; a run whose seed's SSGD run is still to come keeps waiting."""
        for planned in list(self.pending):
            budget = self._budget(planned)
            if budget == "wait":
                continue
            if budget == "blocked":
                self._block([planned])
                continue
            config = self._config(planned, budget)
            if is_done(planned.directory):
                self.pending.remove(planned)
                self.outcome.skipped.append(planned.directory)
            elif self._held(planned, config):
                self.pending.remove(planned)
                self.outcome.skipped.append(planned.directory)
                self.outcome.held.append(planned.directory)
            elif len(self.running) < self.jobs:
                self.pending.remove(planned)
                self.progress.start(planned.label, planned.directory)
                self.running[pool.submit(start, planned, config)] = planned

    def _held(self, planned: Planned, config: dict) -> bool:
        """Whether the records folder holds this run made with ``config``; SSGD's record then
        gives its seed's budget."""
        record = _record_of(self.held, planned.label)
        if record is None or not made_with(record, config):
            return False
        if planned.label.strategy == BASELINE:
            self.budgets[planned.directory] = float(record["summary"]["virtual-time"])
        return True

    def _block(self, runs: list[Planned]) -> None:
        """Give up on runs whose budget will not be known (their SSGD run failed)."""
        for planned in runs:
            self.pending.remove(planned)
            self.outcome.blocked.append(planned.directory)
            self.progress.blocked(planned.label)

    def _config(self, planned: Planned, budget: float | None) -> dict:
        """The run's config, made and checked against its folder once."""
        if planned.directory not in self.configs:
            label = planned.label
            config = self.spec.config(label.strategy, label.split, label.seed, budget)
            config["output-dir"] = str(planned.directory.resolve())
            check_existing(planned.directory, config)
            self.configs[planned.directory] = config
        return self.configs[planned.directory]

    def _budget(self, planned: Planned) -> float | None | str:
        """The run's virtual-time budget (None: SSGD's rounds), or "wait" while its seed's SSGD
        run is still pending or running, or "blocked" when that one failed."""
        label = planned.label
        if not self.spec.budget_from_baseline() or label.strategy == BASELINE:
            return self.spec.max_virtual_time
        baseline = run_dir(self.out, label.split, BASELINE, label.seed)
        # read only once its run has ended: a history being written is not yet a budget
        ended = all(p.directory != baseline for p in self.running.values())
        if baseline not in self.budgets and ended and is_done(baseline):
            self.budgets[baseline] = baseline_budget(baseline)
        if baseline in self.budgets:
            return self.budgets[baseline]
        if baseline in self.outcome.failed or baseline in self.outcome.blocked:
            return "blocked"
        return "wait"

    def _ended(self, future: Future) -> None:
        """Count a run that ended and print its line (a run whose thread raised has failed)."""
        planned = self.running.pop(future)
        error = future.exception()
        status = 1 if error is not None else future.result()
        if error is not None:
            with (planned.directory / RUN_LOG).open("a") as log:
                log.write(f"\nfl-async bench: the run could not be started: {error!r}\n")
        # status 0 leaves a history (run_one); another may too, when the run ended by its own
        # rule: the app exits 1, but the run is finished, as its seed ends it so again
        fields = _summary(planned.directory, status) if error is None else None
        rule = None
        if status != 0 and fields is not None and ended_by_its_rule(fields):
            rule = fields["stopped-by"]
        done = status == 0 or rule is not None
        (self.outcome.ran if done else self.outcome.failed).append(planned.directory)
        queued = [p.label.strategy for p in self.pending]
        final = fields["final-accuracy"] if done and fields is not None else None
        accuracy = None if final is None else float(final)
        where = planned.directory / RUN_LOG
        self.progress.finish(planned.label, status, accuracy, queued, where, rule=rule)


def _summary(directory: Path, status: int) -> dict | None:
    """The ended run's ``summary`` (its final accuracy is its last central evaluation, as its
    record says), from the history its ``run-status.json`` names; for a run that exited
    non-zero, None without a finished status and a readable history."""
    history = finished_history(directory)
    if history is None:
        return None
    try:
        return summary(read_history(history))
    except InvalidArgument:
        if status == 0:  # it said it finished: its damaged history is an error to show
            raise
        return None
