"""``MLflowTracker``: a run as an MLflow run (``pip install 'fl-async[tracking]'``).

It talks to the store through ``MlflowClient`` with an explicit run, so nothing of MLflow's
global "active run" state is touched: a local SQLite store (``sqlite:///path/mlflow.db``), a
folder (``file:///path``) or a tracking server (``http://host:5000``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from fl_async.tracking.base import Param

MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
"""MLflow's limits on one ``log_batch`` call."""


class MLflowTracker:
    """Logs one run into ``experiment`` (created when missing) of the store at ``uri``, as an
    MLflow run named ``run_name``."""

    def __init__(self, *, uri: str, run_name: str, experiment: str = "fl-async") -> None:
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self._client = MlflowClient(tracking_uri=uri)
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        self.run_id = self._client.create_run(experiment_id, run_name=run_name).info.run_id
        self._status = "FAILED"  # until the summary is written

    def __repr__(self) -> str:
        """Where it writes."""
        return f"MLflowTracker(uri={self.uri!r}, run_id={self.run_id!r})"

    def log_params(self, params: Mapping[str, Param]) -> None:
        """The parameters as MLflow params (text)."""
        from mlflow.entities import Param as MLflowParam

        entries = [MLflowParam(key, str(value)) for key, value in params.items()]
        for chunk in _chunks(entries, MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=chunk)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """One metric point per entry at ``step``."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        entries = [Metric(key, float(value), stamp, int(step)) for key, value in metrics.items()]
        for chunk in _chunks(entries, MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=chunk)

    def log_summary(self, metrics: Mapping[str, float], texts: Mapping[str, str]) -> None:
        """The final numbers as metrics at step 0 and the texts as the run's tags."""
        self.log_metrics(metrics, step=0)
        for key, text in texts.items():
            self._client.set_tag(self.run_id, key, text)
        self._status = "FINISHED"

    def close(self) -> None:
        """End the MLflow run (FAILED when it ended before its summary)."""
        self._client.set_terminated(self.run_id, status=self._status)


def _chunks(entries: list, size: int) -> Iterable[list]:
    for start in range(0, len(entries), size):
        yield entries[start : start + size]
