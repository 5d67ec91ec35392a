"""The ``Tracker`` interface and how a run's history is fed to one.

A run is logged from the dictionary the ServerApp writes to ``history.json`` (``fl_async.app.
results.history_of``), after the run: nothing is computed for the tracker, and what it shows is
what ``history.json`` holds. Metric names and steps (docs/running.md, "Experiment tracking"):

- ``eval/accuracy``, ``eval/loss``, ``eval/virtual-time``, ``eval/wall-time``,
  ``eval/num-updates`` at step = server step, one point per central evaluation;
- ``eval-by-virtual-time/accuracy`` and ``.../loss`` at step = virtual time in milliseconds
  (trackers' steps are integers; a run with ``clock.type = "real"`` has no virtual time);
- ``update/staleness``, ``update/server-step``, ``update/virtual-time``, ``update/update-norm``
  (where the update guard measured it) and ``update/rejected`` (updates rejected so far) at
  step = the update's index (1, 2, ...);
- the summary: ``summary/final-accuracy``, ``summary/final-loss``, ``summary/num-updates``,
  ``summary/server-steps``, ``summary/virtual-time``, ``summary/wall-time``,
  ``summary/faults/<kind>``, ``summary/rejected/<reason>``, and the texts ``stopped-by`` and
  ``stop-detail``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

Param = bool | int | float | str
"""A hyperparameter or run-config value as a tracker records it."""


@runtime_checkable
class Tracker(Protocol):
    """Where a run is logged: parameters once, metrics at integer steps, a final summary."""

    def log_params(self, params: Mapping[str, Param]) -> None:
        """Record the run's hyperparameters and run config (once)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` at ``step``."""

    def log_summary(self, metrics: Mapping[str, float], texts: Mapping[str, str]) -> None:
        """Record the run's final numbers and texts (once, after the last ``log_metrics``)."""

    def close(self) -> None:
        """Flush and release what the tracker holds."""


def track_history(tracker: Tracker, history: Mapping[str, Any]) -> None:
    """Log the run that ``history`` (``history.json``'s dictionary) describes, then close."""
    try:
        tracker.log_params(params_of(history))
        for step, metrics in evaluation_points(history):
            tracker.log_metrics(metrics, step)
        for step, metrics in update_points(history):
            tracker.log_metrics(metrics, step)
        tracker.log_summary(*summary_of(history))
    finally:
        tracker.close()


def params_of(history: Mapping[str, Any]) -> dict[str, Param]:
    """The run config's keys and the strategy as resolved at the end of the run (``strategy.*``:
    its class, aggregator, policy, guard and clock, "auto" settings replaced by their values)."""
    params: dict[str, Param] = {
        key: value for key, value in history.get("config", {}).items() if _is_param(value)
    }
    for key, value in (history.get("strategy") or {}).items():
        params[f"strategy.{key}"] = value if _is_param(value) else json.dumps(value)
    params["num-nodes"] = history.get("num-nodes", params.get("num-nodes", 0))
    return params


def evaluation_points(history: Mapping[str, Any]) -> Iterator[tuple[int, dict[str, float]]]:
    """``(step, metrics)`` of each central evaluation, by server step and, with a virtual clock,
    by virtual time (ms)."""
    virtual = history.get("config", {}).get("clock.type", "virtual") == "virtual"
    for evaluation in history.get("evaluations", []):
        metrics = _numbers(
            {f"eval/{key}": value for key, value in evaluation.items() if key != "server-step"}
        )
        yield int(evaluation["server-step"]), metrics
        by_time = _numbers(
            {f"eval-by-virtual-time/{key}": evaluation.get(key) for key in ("accuracy", "loss")}
        )
        if virtual and by_time and evaluation.get("virtual-time") is not None:
            yield round(1000 * float(evaluation["virtual-time"])), by_time


_UPDATE_FIELDS = ("staleness", "server-step", "virtual-time", "update-norm")


def update_points(history: Mapping[str, Any]) -> Iterator[tuple[int, dict[str, float]]]:
    """``(index, metrics)`` of each update: staleness, server step, virtual time, update norm
    (when measured), rejected so far."""
    rejected = 0
    for update in history.get("updates", []):
        rejected += 0 if update.get("accepted", True) else 1
        fields = {key: update.get(key) for key in _UPDATE_FIELDS}
        metrics = _numbers({f"update/{key}": value for key, value in fields.items()})
        metrics["update/rejected"] = float(rejected)
        yield int(update["index"]), metrics


def summary_of(history: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """The final numbers (``summary/...``) and the texts ``stopped-by`` and ``stop-detail``."""
    keys = (
        "final-accuracy",
        "final-loss",
        "num-updates",
        "server-steps",
        "virtual-time",
        "wall-time",
    )
    numbers = {f"summary/{key}": history.get(key) for key in keys}
    for group in ("faults", "rejected"):
        for kind, count in (history.get(group) or {}).items():
            numbers[f"summary/{group}/{kind}"] = count
    texts = {key: str(history.get(key) or "") for key in ("stopped-by", "stop-detail")}
    return _numbers(numbers), texts


def _is_param(value: object) -> bool:
    return isinstance(value, (bool, int, float, str))


def _numbers(values: Mapping[str, object]) -> dict[str, float]:
    """The entries that are numbers (``history.json`` writes a non-finite value as null)."""
    return {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


__all__ = [
    "Param",
    "Tracker",
    "evaluation_points",
    "params_of",
    "summary_of",
    "track_history",
    "update_points",
]
