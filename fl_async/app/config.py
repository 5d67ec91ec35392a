"""The ServerApp's view of the run config: ``AppConfig``, read from a run config that
``fl_async.config`` checked (every key, its default and its check live there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fl_async.app.flower_fedavg import FLOWER_FEDAVG, check_flower_fedavg
from fl_async.config import (
    PRESET_TABLES,
    TRAIN_KEYS,
    TrainSpec,
    Value,
    check_run_config,
)
from fl_async.data_spec import DataSpec
from fl_async.hyperparameters import PRESET_DEFAULT
from fl_async.validation import InvalidArgument

STUDY_DIR = "study-dir"
"""The launcher's key (in the app's run config, not a run's): the study folder whose runs the
ServerApp makes in one simulation (``fl-async bench``); empty for a run of its own. The
ServerApp takes it out before it reads the run config, so no run's config holds it."""


@dataclass(frozen=True)
class AppConfig:
    """A checked run config: what the ServerApp builds the run from."""

    values: dict[str, Value]
    """Every key, defaults filled in (written to history.json)."""
    strategy: str
    hyperparameters: dict[str, Any]
    """Keyword arguments of the preset (snake_case), ``"default"`` ones left out."""
    num_nodes: int
    seed: int
    num_rounds: int
    max_updates: int | None
    max_virtual_time: float | None
    max_wall_time: float | None
    target_accuracy: float | None
    eval_every: int | None
    eval_grid: int | None
    max_in_flight: int | None
    timeout: float
    federated_evaluation: bool
    clock: str
    clock_speed: str
    clock_sigma: float
    clock_jitter: float
    clock_trace: str
    correlate: str
    data: DataSpec
    train: TrainSpec
    device: str
    output_dir: str
    checkpoint_every: int | None
    data_download: bool
    """Fetch a missing named dataset before the run starts (``data-download``)."""

    def train_config(self) -> dict[str, Value]:
        """The training settings sent with every task.

        ``local-steps`` goes only when set (> 0): the strategy's virtual clock counts a task's
        examples from ``local-steps`` when the key is present, else from ``local-epochs``.
        """
        config = {key: self.values[key] for key in TRAIN_KEYS}
        if self.train.steps is None:
            del config["local-steps"]
        else:
            del config["local-epochs"]
        return config


def parse_run_config(run_config: Mapping[str, Any]) -> AppConfig:
    """Check ``run_config`` (missing keys take their defaults); ``InvalidArgument`` (a
    ValueError) names the key, the value and what is allowed."""
    values = check_run_config(run_config)
    strategy = str(values["strategy"])
    if strategy == FLOWER_FEDAVG:
        check_flower_fedavg(values)
    virtual_budget = values["max-virtual-time"] and values["clock.type"] == "virtual"
    if values["eval-grid"] and not virtual_budget:
        raise InvalidArgument(
            f"run config 'eval-grid' = {values['eval-grid']} needs a virtual clock and "
            "max-virtual-time > 0: the grid's times are virtual and span that budget"
        )
    if values["send-ahead"] and values["clock.type"] == "real":
        raise InvalidArgument(
            f"run config 'send-ahead' = {values['send-ahead']} needs clock.type = 'virtual': "
            "in real time every task is awaited at once, so none may be held back"
        )
    return AppConfig(
        values=values,
        strategy=strategy,
        hyperparameters=_hyperparameters(strategy, values),
        num_nodes=int(values["num-nodes"]),
        seed=int(values["seed"]),
        num_rounds=int(values["num-rounds"]),
        max_updates=int(values["max-updates"]) or None,
        max_virtual_time=float(values["max-virtual-time"]) or None,
        max_wall_time=float(values["max-wall-time"]) or None,
        target_accuracy=float(values["target-accuracy"]) or None,
        eval_every=int(values["eval-every"]) or None,
        eval_grid=int(values["eval-grid"]) or None,
        max_in_flight=int(values["max-in-flight"]) or None,
        timeout=float(values["timeout"]),
        federated_evaluation=bool(values["federated-evaluation"]),
        clock=str(values["clock.type"]),
        clock_speed=str(values["clock.speed"]),
        clock_sigma=float(values["clock.sigma"]),
        clock_jitter=float(values["clock.jitter"]),
        clock_trace=str(values["clock.trace"]),
        correlate=str(values["correlate"]),
        data=DataSpec.from_config(values),
        train=TrainSpec.from_configs({}, values),
        device=str(values["device"]),
        output_dir=str(values["output-dir"]),
        checkpoint_every=int(values["checkpoint-every"]) or None,
        data_download=bool(values["data-download"]),
    )


def _hyperparameters(strategy: str, values: Mapping[str, Value]) -> dict[str, Any]:
    found = {}
    for key in PRESET_TABLES.get(strategy, {}):  # Flower's own strategies take none
        value = values[f"{strategy}.{key}"]
        if value != PRESET_DEFAULT:
            found[key.replace("-", "_")] = value
    return found
