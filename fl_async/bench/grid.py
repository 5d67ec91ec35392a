"""The comparison grid: every run's test accuracy at G equally spaced virtual times over its budget.

A run started with the run config ``eval-grid = G`` records it itself (``history.json``'s
``grid-evaluations``: the model in force at ``T * i / G``, ``i = 1..G``). SSGD, when it sets the
budget, cannot: T is its own final virtual time, unknown before it ends. It is evaluated at every
server step, and its model only changes at a server step, so its grid follows exactly from its
per-step evaluations (``derive_grid``): at time g, the last evaluation at virtual time ``<= g``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fl_async.validation import InvalidArgument, check_int, check_number

DEFAULT_GRID = 40
"""Grid points per run (``fl-async bench --grid``)."""
NO_GRID = "no grid: re-run"
"""The note of a run whose history holds no grid (made before ``eval-grid``) and gives none."""
RECORDED = "recorded"
DERIVED = "derived"
_MARGIN = 1e-9
"""Relative margin on grid times, computed as ``T * i / G`` (may be an ulp off ``T`` at i = G)."""

History = Mapping[str, Any]


@dataclass(frozen=True)
class Grid:
    """One run's grid: its points' virtual times, test accuracies and wall times (points 1..k of
    ``size``; k < size when the run stopped before the budget was spent)."""

    size: int
    budget: float
    times: tuple[float, ...]
    accuracies: tuple[float, ...]
    walls: tuple[float | None, ...]
    source: str

    @property
    def complete(self) -> bool:
        """Whether every one of the ``size`` points was evaluated."""
        return len(self.times) == self.size


def derive_grid(history: History, size: int, budget: float | None = None) -> list[dict[str, Any]]:
    """The ``grid-evaluations`` of a run evaluated at every server step, from its evaluations.

    ``budget`` T defaults to the run's ``max-virtual-time`` if set, else its final virtual time.
    Point i (time ``T * i / G``) takes the last evaluation at virtual time ``<= T * i / G``: the
    model in force then, with its server step, accuracy, loss, wall time and update count.
    Points after the run's final virtual time, or before its first evaluation, are left out.
    """
    check_int("grid size", size, minimum=1)
    if not evaluates_every_step(history):
        raise InvalidArgument(
            "derive_grid needs a run evaluated at every server step (eval-every 1), got "
            f"evaluations at {len(_evaluations(history))} of {history.get('server-steps')} steps"
        )
    total = budget_of(history) if budget is None else budget
    total = check_number("grid budget", total, minimum=0, min_open=True)
    end = float(history.get("virtual-time") or total)
    evaluations = sorted(_evaluations(history), key=lambda e: float(e["virtual-time"]))
    grid = []
    for index in range(1, size + 1):
        at = total * index / size
        slack = _MARGIN * total  # an evaluation at T must count for the point T * G / G
        if at > end + slack:
            break
        before = [e for e in evaluations if float(e["virtual-time"]) <= at + slack]
        if before:
            grid.append(_point(index, at, before[-1]))
    return grid


def _point(index: int, at: float, evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """Grid point ``index`` at ``at`` from the evaluation in force then (same keys as recorded)."""
    point = {"index": index, "virtual-time": at}
    point.update({k: v for k, v in evaluation.items() if k != "virtual-time"})
    return point


def evaluates_every_step(history: History) -> bool:
    """Whether the run's evaluations cover every server step 0..``server-steps``."""
    steps = history.get("server-steps")
    if steps is None:
        return False
    evaluated = {int(e["server-step"]) for e in _evaluations(history)}
    return set(range(int(steps) + 1)) <= evaluated


def budget_of(history: History) -> float:
    """The run's virtual-time budget T: its ``max-virtual-time``, else its final virtual time."""
    configured = float(history.get("config", {}).get("max-virtual-time") or 0.0)
    return configured or float(history.get("virtual-time") or 0.0)


def run_grid(history: History, size: int = DEFAULT_GRID) -> Grid | None:
    """The run's grid: recorded if it has one, else derived (``size`` points) if it was
    evaluated at every server step, else None (``grid_note`` says why)."""
    found = grid_points(history, size)
    if found is None:
        return None
    source, grid_size, points = found
    return _grid(points, grid_size, budget_of(history), source)


def grid_points(
    history: History, size: int = DEFAULT_GRID
) -> tuple[str, int, list[Mapping[str, Any]]] | None:
    """The source, G and points of the run's grid (``run_grid``), None when it has none."""
    recorded = [g for g in history.get("grid-evaluations") or [] if g.get("accuracy") is not None]
    if recorded:
        configured = int(history.get("config", {}).get("eval-grid") or 0)
        return RECORDED, configured or len(recorded), recorded + _last_point(history, recorded)
    if "grid-evaluations" in history and history.get("config", {}).get("eval-grid"):
        return None  # run with a grid, stopped before its first point: nothing to derive either
    if evaluates_every_step(history) and budget_of(history) > 0:
        return DERIVED, size, derive_grid(history, size)
    return None


def _last_point(history: History, recorded: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Point G of a recorded grid that lacks only it, from the run's final evaluation, when that
    evaluation is of the model in force at ``T * G / G`` (else nothing).

    Before the fix in ``AsyncStrategy`` the last grid time was computed as ``T * G / G``, which
    can exceed T by one ulp: a run stopped at T (its last update applied at T) then never took
    point G. Its final evaluation is then that point exactly: it evaluates the final version, at
    a virtual time no later than the grid time, and no update came after it.
    """
    size = int(history.get("config", {}).get("eval-grid") or 0)
    indices = {int(p["index"]) for p in recorded}
    if not size or indices != set(range(1, size)):
        return []
    budget = budget_of(history)
    at = budget * size / size  # the time the strategy computed for point G
    final = _evaluations(history)[-1:]
    reached = float(history.get("virtual-time") or 0.0) >= budget * (1 - _MARGIN)
    if not final or not reached:
        return []
    last = final[0]
    if float(last["virtual-time"]) > at or last.get("server-step") != history.get("server-steps"):
        return []
    restored = {key: last.get(key) for key in ("server-step", "accuracy", "loss", "wall-time")}
    return [{"index": size, "virtual-time": at, **restored}]


def _grid(points: Sequence[Mapping[str, Any]], size: int, budget: float, source: str) -> Grid:
    ordered = sorted(points, key=lambda p: int(p["index"]))
    return Grid(
        size=size,
        budget=budget,
        times=tuple(float(p["virtual-time"]) for p in ordered),
        accuracies=tuple(float(p["accuracy"]) for p in ordered),
        walls=tuple(None if p.get("wall-time") is None else float(p["wall-time"]) for p in ordered),
        source=source,
    )


def grid_note(history: History, grid: Grid | None) -> str | None:
    """Why the run has no grid or an incomplete one (None when it is complete)."""
    if grid is None and not history.get("config", {}).get("eval-grid"):
        return NO_GRID  # made before eval-grid (or outside the bench) and not derivable
    stopped = f"stopped by {history.get('stopped-by')} at virtual time "
    stopped += f"{float(history.get('virtual-time') or 0):.0f}"
    if grid is None:
        return f"no grid point ({stopped})"
    if not grid.complete:
        return f"grid {len(grid.times)}/{grid.size} ({stopped})"
    return None


def split_grid_size(histories: Iterable[History], default: int = DEFAULT_GRID) -> int:
    """G of runs that recorded their grid (``eval-grid``), else ``default``: a derived grid
    takes the same points as the runs it is compared with."""
    for history in histories:
        configured = int(history.get("config", {}).get("eval-grid") or 0)
        if configured:
            return configured
    return default


def _evaluations(history: History) -> list[Mapping[str, Any]]:
    return [e for e in history.get("evaluations", []) if e.get("accuracy") is not None]
