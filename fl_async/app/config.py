"""The run config of the fl-async Flower App: every key, its default, and how it is read.

``flwr run`` fuses ``[tool.flwr.app.config]`` of pyproject.toml with ``--run-config``, and
accepts only keys that table declares. ``DEFAULTS`` holds the same keys and values (a test keeps
them equal), so the app also runs where the run config is empty, as under
``flwr.simulation.run_simulation``. TOML has no null: ``0`` switches a budget off, and
``"default"`` leaves a strategy hyperparameter at the preset's own default.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flwr.app import UserConfigValue

from fl_async.clients.client_app import (
    CLIENT_DEFAULTS,
    TRAIN_KEYS,
    DataSpec,
    TrainSpec,
    setting,
    typed,
)
from fl_async.scheduling import SPEED_MODELS
from fl_async.strategies import PRESETS

CLOCKS: tuple[str, ...] = ("virtual", "real")
CORRELATIONS: tuple[str, ...] = ("none", "few-classes-fast", "many-classes-fast")
PRESET_DEFAULT = "default"
"""A strategy hyperparameter set to this keeps the preset's default (None in Python)."""

SERVER_DEFAULTS: dict[str, UserConfigValue] = {
    "strategy": "gsgm",
    "num-nodes": 20,
    "num-rounds": 20,
    "max-updates": 0,
    "max-virtual-time": 0.0,
    "max-wall-time": 0.0,
    "target-accuracy": 0.0,
    "eval-every": 0,
    "max-in-flight": 0,
    "timeout": 600.0,
    "federated-evaluation": False,
    "clock.type": "virtual",
    "clock.speed": "lognormal",
    "clock.sigma": 1.0,
    "clock.jitter": 0.0,
    "clock.trace": "",
    "correlate": "none",
    "output-dir": "",
    "checkpoint-every": 0,
}
"""The keys only the ServerApp reads (``CLIENT_DEFAULTS`` has the shared and client keys)."""


def preset_defaults(name: str) -> dict[str, UserConfigValue]:
    """The hyperparameters of preset ``name`` (hyphenated) with the preset's defaults."""
    found: dict[str, UserConfigValue] = {}
    for parameter in inspect.signature(PRESETS[name].__init__).parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            default = parameter.default
            found[parameter.name.replace("_", "-")] = PRESET_DEFAULT if default is None else default
    return found


DEFAULTS: dict[str, UserConfigValue] = {
    **SERVER_DEFAULTS,
    **CLIENT_DEFAULTS,
    **{f"{name}.{key}": value for name in PRESETS for key, value in preset_defaults(name).items()},
}
"""Every key of the run config with its default: ``[tool.flwr.app.config]`` holds the same."""


@dataclass(frozen=True)
class AppConfig:
    """A checked run config: what the ServerApp builds the run from."""

    values: dict[str, UserConfigValue]
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

    def train_config(self) -> dict[str, UserConfigValue]:
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
    """Check ``run_config`` (missing keys take ``DEFAULTS``); ValueError says what is allowed."""
    unknown = sorted(set(run_config) - set(DEFAULTS))
    if unknown:
        raise ValueError(
            f"unknown run config key(s) {unknown}; docs/running.md lists every key "
            f"(e.g. {', '.join(list(SERVER_DEFAULTS)[:6])}, ...)"
        )
    values = {key: _value(key, run_config) for key in DEFAULTS}
    strategy = str(values["strategy"]).lower()
    if strategy not in PRESETS:
        raise ValueError(f"unknown strategy {values['strategy']!r}; allowed: {', '.join(PRESETS)}")
    values["strategy"] = strategy
    for key, allowed in (
        ("clock.type", CLOCKS),
        ("correlate", CORRELATIONS),
        ("clock.speed", tuple(SPEED_MODELS)),
    ):
        if values[key] not in allowed:
            raise ValueError(f"unknown {key} {values[key]!r}; allowed: {', '.join(allowed)}")
    if values["clock.type"] == "real" and values["correlate"] != "none":
        raise ValueError("correlate needs clock.type = 'virtual' (it ranks simulated speeds)")
    data = DataSpec.from_config(values)
    train = TrainSpec.from_configs({}, values)
    return AppConfig(
        values=values,
        strategy=strategy,
        hyperparameters=_hyperparameters(strategy, values),
        num_nodes=_at_least(values, "num-nodes", 1),
        seed=data.seed,
        num_rounds=_at_least(values, "num-rounds", 1),
        max_updates=_at_least(values, "max-updates", 0) or None,
        max_virtual_time=_non_negative(values, "max-virtual-time") or None,
        max_wall_time=_non_negative(values, "max-wall-time") or None,
        target_accuracy=_fraction(values, "target-accuracy") or None,
        eval_every=_at_least(values, "eval-every", 0) or None,
        max_in_flight=_at_least(values, "max-in-flight", 0) or None,
        timeout=_positive(values, "timeout"),
        federated_evaluation=bool(values["federated-evaluation"]),
        clock=str(values["clock.type"]),
        clock_speed=str(values["clock.speed"]),
        clock_sigma=_non_negative(values, "clock.sigma"),
        clock_jitter=_non_negative(values, "clock.jitter"),
        clock_trace=str(values["clock.trace"]),
        correlate=str(values["correlate"]),
        data=data,
        train=train,
        device=str(values["device"]),
        output_dir=str(values["output-dir"]),
        checkpoint_every=_at_least(values, "checkpoint-every", 0) or None,
    )


def _value(key: str, run_config: Mapping[str, Any]) -> UserConfigValue:
    if key in CLIENT_DEFAULTS:
        return setting(key, run_config)
    if key not in run_config:
        return DEFAULTS[key]
    value, default = run_config[key], DEFAULTS[key]
    if key in SERVER_DEFAULTS:
        return typed(key, value, default)
    # A preset hyperparameter: "auto", "default", a staleness name or a number, which the preset
    # itself checks; only an int where the default is a float is cast (TOML writes 1 for 1.0).
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _hyperparameters(strategy: str, values: Mapping[str, UserConfigValue]) -> dict[str, Any]:
    found = {}
    for key in preset_defaults(strategy):
        value = values[f"{strategy}.{key}"]
        if value != PRESET_DEFAULT:
            found[key.replace("-", "_")] = value
    return found


def _at_least(values: Mapping[str, Any], key: str, minimum: int) -> int:
    value = int(values[key])
    if value < minimum:
        raise ValueError(f"run config {key!r} must be an integer >= {minimum}, got {value}")
    return value


def _non_negative(values: Mapping[str, Any], key: str) -> float:
    value = float(values[key])
    if not value >= 0:
        raise ValueError(f"run config {key!r} must be >= 0, got {value}")
    return value


def _positive(values: Mapping[str, Any], key: str) -> float:
    value = float(values[key])
    if not value > 0:
        raise ValueError(f"run config {key!r} must be > 0, got {value}")
    return value


def _fraction(values: Mapping[str, Any], key: str) -> float:
    value = float(values[key])
    if not 0 <= value <= 1:
        raise ValueError(f"run config {key!r} must lie in [0, 1], got {value}")
    return value
