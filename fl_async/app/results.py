"""What a run leaves behind: ``history.json``, ``accuracy.png`` and ``staleness.png``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fl_async.files import read_json, write_atomically
from fl_async.plotting import accuracy_axes, new_figure, save_figure, staleness_histogram
from fl_async.strategies import AsyncResult

HISTORY = "history.json"
ACCURACY_PLOT = "accuracy.png"
STALENESS_PLOT = "staleness.png"
_FIGURE_SIZE = (6.4, 4.0)  # inches
HISTORY_KEYS = ("stopped-by", "virtual-time", "evaluations", "updates")
"""What every ``history.json`` holds, and what reading one back checks for."""
STARTED_AT = "%Y-%m-%dT%H:%M:%S%z"
"""The ``time.strftime`` format of history.json's ``started-at`` (local time with its offset)."""


def history_of(result: AsyncResult, **info: Any) -> dict[str, Any]:
    """The run as plain JSON values: ``info`` (keys hyphenated) then what ``result`` holds.

    ``stopped-by`` is why the run ended (a budget, the target, or a reason in ``FAILED_STOPS``
    when it could not make progress) and ``stop-detail`` says it in words.

    ``evaluations`` has one entry per central evaluation (``server-step``, ``accuracy``,
    ``loss``, ``virtual-time``, ``wall-time``, ``num-updates``); ``updates`` one per reply, in
    the order the strategy applied them, with ``index`` (1, 2, ...) and its record;
    ``grid-evaluations`` one per point of the virtual-time grid (``eval-grid``), with ``index``
    (1..G), ``virtual-time`` and the ``server-step`` in force then.
    """
    evaluations = [
        {"server-step": int(step), **dict(record)}
        for step, record in sorted(result.evaluate_metrics_serverapp.items())
    ]
    updates = [
        {"index": int(index), **dict(record)}
        for index, record in sorted(result.train_metrics_clientapp.items())
    ]
    grid = [
        {"index": int(index), **dict(record)}
        for index, record in sorted(result.evaluate_metrics_grid.items())
    ]
    final = evaluations[-1] if evaluations else {}
    federated = {
        int(step): dict(record) for step, record in result.evaluate_metrics_clientapp.items()
    }
    return {
        **{key.replace("_", "-"): value for key, value in info.items()},
        "stopped-by": result.stopped_by,
        "stop-detail": result.stop_detail,
        "num-updates": result.num_updates,
        "server-steps": result.server_steps,
        "virtual-time": result.virtual_time,
        "wall-time": result.wall_time,
        "final-accuracy": final.get("accuracy"),
        "final-loss": final.get("loss"),
        "faults": dict(result.faults),
        "rejected": dict(result.rejected),
        "evaluations": evaluations,
        "grid-evaluations": grid,
        "federated-evaluations": federated,
        "updates": updates,
    }


def read_history(path: Path) -> dict[str, Any]:
    """The ``history.json`` at ``path``; ``InvalidArgument`` in one line when it is damaged or
    another program's, naming the file and what to do."""
    return read_json(
        path,
        "run history",
        keys=HISTORY_KEYS,
        fix="delete its run folder (a suite runs it again) or restore the file",
    )


def write_results(directory: Path, history: Mapping[str, Any]) -> list[Path]:
    """Write ``history.json`` (atomically) and both plots into ``directory``; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / HISTORY, directory / ACCURACY_PLOT, directory / STALENESS_PLOT]
    _write_json(paths[0], history)
    plot_accuracy(history, paths[1])
    plot_staleness(history, paths[2])
    return paths


def plot_accuracy(history: Mapping[str, Any], path: Path) -> None:
    """Central test accuracy against virtual time (wall time when the clock is real)."""
    figure = new_figure(_FIGURE_SIZE)
    axes = figure.add_subplot()
    virtual = history.get("config", {}).get("clock.type", "virtual") == "virtual"
    time_key = "virtual-time" if virtual else "wall-time"
    points = [e for e in history["evaluations"] if "accuracy" in e]
    axes.plot(
        [e[time_key] for e in points], [e["accuracy"] for e in points], marker="o", markersize=3
    )
    accuracy_axes(axes, "virtual time (s)" if virtual else "wall time (s)")
    axes.set_title(_title(history))
    save_figure(figure, path)


def plot_staleness(history: Mapping[str, Any], path: Path) -> None:
    """Histogram of the staleness (server steps) of every update the server received."""
    figure = new_figure(_FIGURE_SIZE)
    axes = figure.add_subplot()
    summary = staleness_histogram(axes, [u["staleness"] for u in history["updates"]])
    axes.set_title(f"{_title(history)}\nstaleness: {summary}")
    save_figure(figure, path)


def _title(history: Mapping[str, Any]) -> str:
    config = history.get("config", {})
    scheme = config.get("partition.scheme", "")
    if scheme == "dirichlet":
        scheme = f"dirichlet({config.get('partition.alpha')})"
    return (
        f"{config.get('strategy', '').upper()} on {config.get('dataset', '')}, "
        f"{history.get('num-nodes', '?')} nodes, {scheme}"
    )


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    # Write then rename: a reader (or a crash) never sees half a history.
    write_atomically(path, json.dumps(_finite(value), indent=1, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN/inf as None (strict JSON)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
