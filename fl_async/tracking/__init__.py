"""Experiment tracking: a run's settings, evaluations, updates and summary in TensorBoard or
MLflow, on request (run config ``tracking.backend``, launcher option ``--track``).

Both backends come with ``pip install 'fl-async[tracking]'``; any object with the ``Tracker``
methods works with ``track_history`` too. A run is logged when it ends, from the data of its
``history.json`` (docs/running.md, "Experiment tracking").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fl_async.extras import require
from fl_async.tracking.base import Tracker, track_history
from fl_async.validation import check_choice

BACKENDS: tuple[str, ...] = ("tensorboard", "mlflow")
"""The trackers ``tracking.backend`` names (``fl_async.config.TRACKERS`` holds the same)."""
INSTALL_TRACKING = "pip install 'fl-async[tracking]'"
"""The command that installs the tracking backends (TensorBoard, MLflow)."""
TENSORBOARD_DIR = "tensorboard"
"""A run's TensorBoard folder inside its output-dir when ``tracking.uri`` is empty."""
MLFLOW_DB = "mlflow.db"
"""A run's SQLite MLflow store inside its output-dir when no URI is given."""
_MODULES = {"tensorboard": ("tensorboard",), "mlflow": ("mlflow",)}


def require_backend(backend: str) -> None:
    """``ModuleNotFoundError`` naming the extra when ``backend``'s package is missing;
    ``InvalidArgument`` for an unknown backend."""
    check_choice("tracking.backend", backend, BACKENDS)
    require(f"tracking.backend = {backend!r}", *_MODULES[backend], install=INSTALL_TRACKING)


def make_tracker(backend: str, *, uri: str, run_name: str, output_dir: Path) -> Tracker:
    """The ``backend`` tracker of one run.

    TensorBoard: event files in ``<uri>/<run_name>``, or ``<output_dir>/tensorboard`` when
    ``uri`` is empty. MLflow: an MLflow run named ``run_name`` in the store at ``uri``, else
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<output_dir>/mlflow.db``.
    """
    require_backend(backend)
    if backend == "tensorboard":
        from fl_async.tracking.tensorboard_tracker import TensorBoardTracker

        log_dir = Path(uri).expanduser() / run_name if uri else output_dir / TENSORBOARD_DIR
        return TensorBoardTracker(log_dir=log_dir)
    from fl_async.tracking.mlflow_tracker import MLflowTracker

    store = uri or os.environ.get("MLFLOW_TRACKING_URI") or mlflow_default_uri(output_dir)
    if store.startswith("sqlite:///"):  # SQLite makes the file, not its folder
        Path(store[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return MLflowTracker(uri=store, run_name=run_name)


def mlflow_default_uri(directory: Path) -> str:
    """The SQLite store ``directory/mlflow.db`` as an MLflow tracking URI."""
    return f"sqlite:///{(Path(directory) / MLFLOW_DB).resolve()}"


def log_run(
    history: Mapping[str, Any], *, backend: str, uri: str, run_name: str, output_dir: Path
) -> Tracker:
    """Log ``history`` (``history.json``'s dictionary) with ``backend``; the tracker used."""
    tracker = make_tracker(
        backend, uri=uri, run_name=run_name or output_dir.name, output_dir=output_dir
    )
    track_history(tracker, history)
    return tracker


__all__ = [
    "BACKENDS",
    "INSTALL_TRACKING",
    "Tracker",
    "log_run",
    "make_tracker",
    "mlflow_default_uri",
    "require_backend",
    "track_history",
]
