"""A suite's progress as it goes: run k of n, each finished run's accuracy and wall time, and an
estimate of the time left.

The estimate takes each run still to go at the mean wall time of the finished runs of its
preset this call (of every finished run while its preset has none), the runs going now at that
less their time so far, and divides the sum by the runs going at once; never less than the
longest single run left. It is rough: a preset's runs differ with their settings and the
machine's load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fl_async.bench.scenarios import preset_of


@dataclass(frozen=True)
class RunLabel:
    """One run of a suite, as the progress lines name it."""

    split: str
    seed: int
    strategy: str

    def __str__(self) -> str:
        return f"{self.split} seed {self.seed} {self.strategy}"


def format_duration(seconds: float) -> str:
    """``42 s``, ``12 min 5 s``, ``3 h 4 min``: a wall time for a progress line."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def estimate_left(
    finished: Mapping[str, Sequence[float]],
    running: Sequence[tuple[str, float]],
    queued: Sequence[str],
    jobs: int,
) -> float | None:
    """Seconds left (module docstring): ``finished`` preset -> wall times of its finished runs,
    ``running`` (preset, seconds so far) and ``queued`` presets; None before any run finished."""
    every = [wall for walls in finished.values() for wall in walls]
    if not every:
        return None
    overall = sum(every) / len(every)

    def expected(preset: str) -> float:
        walls = finished.get(preset)
        return sum(walls) / len(walls) if walls else overall

    left = [max(expected(p) - elapsed, 0.0) for p, elapsed in running]
    left += [expected(p) for p in queued]
    if not left:
        return 0.0
    return max(sum(left) / max(1, min(jobs, len(left))), max(left))


@dataclass
class Progress:
    """Prints the progress lines of one call of a suite (``total`` runs to run, ``jobs`` at
    once) through ``echo``; ``clock`` gives seconds (injected by tests)."""

    total: int
    jobs: int = 1
    echo: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    started_runs: int = 0
    finished: dict[str, list[float]] = field(default_factory=dict)
    _running: dict[RunLabel, tuple[int, float]] = field(default_factory=dict)

    def start(self, label: RunLabel, where: object) -> None:
        """A run starts: ``run k of n: <label> -> <where>``."""
        self.started_runs += 1
        self._running[label] = (self.started_runs, self.clock())
        self.echo(f"bench: run {self.started_runs} of {self.total}: {label} -> {where}")

    def finish(
        self,
        label: RunLabel,
        status: int,
        accuracy: float | None,
        queued: Sequence[str],
        where: object = "",
        rule: str | None = None,
    ) -> None:
        """A run ended with exit code ``status`` (0: done, with its final ``accuracy``), or ended
        by its own ``rule`` (a stop reason: finished too); ``queued`` names the runs not started
        yet, for the estimate."""
        number, started = self._running.pop(label)
        wall = self.clock() - started
        head = f"bench: run {number} of {self.total}"
        if status == 0 or rule is not None:
            self.finished.setdefault(preset_of(label.strategy), []).append(wall)
            shown = "no accuracy" if accuracy is None else f"final accuracy {100 * accuracy:.1f}%"
            how = "done" if rule is None else f"ended by its own rule ({rule})"
            line = f"{head} {how} in {format_duration(wall)}: {label}, {shown}"
        else:
            line = (
                f"{head} failed (exit {status}) after {format_duration(wall)}: {label}; see {where}"
            )
        self.echo(f"{line}; {self.outlook(queued)}")

    def blocked(self, label: RunLabel) -> None:
        """A run that cannot start: its seed's SSGD run, which sets its budget, failed."""
        self.echo(f"bench: {label} not run: the SSGD run of its seed (its budget) failed")

    def outlook(self, queued: Sequence[str]) -> str:
        """``3 running, 9 to start, about 21 min left`` (no estimate before a run finished)."""
        now = self.clock()
        running = [(preset_of(label.strategy), now - t) for label, (_, t) in self._running.items()]
        presets = [preset_of(name) for name in queued]
        left = estimate_left(self.finished, running, presets, self.jobs)
        counts = f"{len(running)} running, {len(queued)} to start"
        if not running and not queued:
            return "none left"
        if left is None:
            return f"{counts}, no estimate yet"
        return f"{counts}, about {format_duration(left)} left"
