"""The run config of the fl-async Flower App: every key with its default and its check.

One definition for both sides: the ClientApp reads the data, partition and training keys, the
ServerApp all of them. It imports no server code (no strategies, aggregators or scheduling), so
a device runs the ClientApp without them: the names those packages define (speed models,
models) are kept here as data, which tests hold equal, and the presets' keys come from the
rules' declarations (``fl_async.hyperparameters``, which imports no server code either).
``flwr run`` accepts only the keys of pyproject.toml's ``[tool.flwr.app.config]``;
``DEFAULTS`` holds the same keys and values (a test keeps them equal), so the app also runs with
an empty run config, as under ``flwr.simulation.run_simulation``. TOML has no null: ``0``
switches a budget off, and ``"default"`` leaves a strategy hyperparameter at the preset's own
default (docs/running.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_async.hyperparameters import DECLARATIONS
from fl_async.partitioning import SCHEMES
from fl_async.validation import InvalidArgument, check_choice, check_int, check_number, check_seed

Value = bool | int | float | str
"""A run-config value, as TOML and Flower's ``UserConfigValue`` allow."""
Check = Callable[[str, Any], Value]
"""Checks a value for the key named by its first argument; returns it typed."""

CLOCKS: tuple[str, ...] = ("virtual", "real")
CORRELATIONS: tuple[str, ...] = ("none", "few-classes-fast", "many-classes-fast")
SPEEDS: tuple[str, ...] = ("lognormal", "uniform", "pareto", "trace")
"""The names of ``fl_async.scheduling.SPEED_MODELS``."""
MODELS: tuple[str, ...] = ("auto", "cnn", "cnn32", "resnet8", "logreg")
"""The names of ``fl_async.models.MODEL_NAMES``."""
SYNTHETIC = "synthetic"
"""The generated dataset (``fl_async.data.synthetic.NAME``): always split by device (natural)."""
GUARD_MODES: tuple[str, ...] = ("clip", "reject")
"""What the update guard does with an update out of line (``fl_async.aggregators.guard.MODES``)."""
TRACKERS: tuple[str, ...] = ("tensorboard", "mlflow")
"""The backends of ``tracking.backend`` besides "" (off) (``fl_async.tracking.BACKENDS``)."""
SYNTHETIC_MIN_SAMPLES = 50
"""Every Synthetic device's least number of samples (``fl_async.data.synthetic.MIN_SAMPLES``)."""


@dataclass(frozen=True)
class Key:
    """One run-config key: its default and the check every value of it passes."""

    default: Value
    check: Check


def _integer(minimum: int) -> Check:
    return lambda name, value: check_int(name, value, minimum=minimum)


def _number(minimum: float = 0.0, *, positive: bool = False, maximum: float | None = None) -> Check:
    return lambda name, value: check_number(
        name, value, minimum=minimum, min_open=positive, maximum=maximum
    )


def _choice(choices: Iterable[str], *, canonical: Callable[[str], str] = str) -> Check:
    allowed = tuple(choices)

    def check(name: str, value: Any) -> str:
        return check_choice(name, canonical(value) if isinstance(value, str) else value, allowed)

    return check


def _scheme(name: str) -> str:
    return name.replace("-", "_")  # partition() accepts label-skew for label_skew too


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgument(f"{name} must be true or false, got {value!r}")
    return bool(value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string (in quotes), got {value!r}")
    return value


def _sample_cap(name: str, value: Any) -> int:
    value = check_int(name, value, minimum=0)
    if 0 < value < SYNTHETIC_MIN_SAMPLES:
        raise InvalidArgument(
            f"{name} must be 0 (no cap) or at least {SYNTHETIC_MIN_SAMPLES} (every device's "
            f"minimum), got {value}"
        )
    return value


def _guard_factor(name: str, value: Any) -> float:
    if 0 < (value := check_number(name, value, minimum=0)) < 1:
        raise InvalidArgument(f"{name} must be 0 (off) or a number >= 1, got {value!r}")
    return float(value)


PRESET_TABLES: dict[str, dict[str, Value]] = {
    name: declaration.table for name, declaration in DECLARATIONS.items()
}
"""Each preset's hyperparameters (hyphenated) with its defaults ("default" for None), derived
from its declaration (``fl_async.hyperparameters``), as the presets' keyword defaults are."""

STRATEGIES: tuple[str, ...] = tuple(PRESET_TABLES)
"""The presets' names (``fl_async.strategies.PRESETS``)."""

FLOWER_STRATEGIES: tuple[str, ...] = ("flwr-fedavg",)
"""Flower's own strategies the ServerApp also runs, as baselines (``fl_async.app.flower_fedavg``);
not presets: they take no ``<strategy>.*`` hyperparameters."""

SERVER_KEYS: dict[str, Key] = {
    "strategy": Key("gsgm", _choice(STRATEGIES + FLOWER_STRATEGIES, canonical=str.lower)),
    "num-nodes": Key(20, _integer(1)),
    "num-rounds": Key(20, _integer(1)),
    "max-updates": Key(0, _integer(0)),
    "max-virtual-time": Key(0.0, _number()),
    "max-wall-time": Key(0.0, _number()),
    "target-accuracy": Key(0.0, _number(maximum=1.0)),
    "eval-every": Key(0, _integer(0)),
    "eval-grid": Key(0, _integer(0)),
    "max-in-flight": Key(0, _integer(0)),
    "send-ahead": Key(0, _integer(0)),
    "timeout": Key(600.0, _number(positive=True)),
    "federated-evaluation": Key(False, _flag),
    "clock.type": Key("virtual", _choice(CLOCKS)),
    "clock.speed": Key("lognormal", _choice(SPEEDS)),
    "clock.sigma": Key(1.0, _number()),
    "clock.jitter": Key(0.0, _number()),
    "clock.trace": Key("", _text),
    "correlate": Key("none", _choice(CORRELATIONS)),
    "output-dir": Key("", _text),
    "checkpoint-every": Key(0, _integer(0)),
    "data-download": Key(False, _flag),
    "guard.factor": Key(3.0, _guard_factor),
    "guard.mode": Key("clip", _choice(GUARD_MODES)),
    "guard.window": Key(50, _integer(1)),
    "weight-cap": Key(10.0, _guard_factor),  # 0: no bound by the median, as guard.factor's off
    "guard.quorum": Key(3, _integer(1)),
    "guard.direction": Key(1.0, _number()),
    "guard.root-examples": Key(100, _integer(0)),  # 0: no root set, the direction test
    "guard.trust": Key(-0.5, _number(minimum=-1.0, maximum=1.0)),
    "tracking.backend": Key("", _choice(("", *TRACKERS))),
    "tracking.uri": Key("", _text),
    "tracking.run-name": Key("", _text),
}
"""The keys only the ServerApp reads."""

NODE_KEYS: dict[str, Key] = {
    "dataset": Key("mnist", _text),
    "data-root": Key("", _text),
    "model": Key("auto", _choice(MODELS)),
    "seed": Key(0, check_seed),
    "partition.scheme": Key("dirichlet", _choice(SCHEMES, canonical=_scheme)),
    "partition.alpha": Key(0.3, _number(positive=True)),
    "partition.min-partition-size": Key(1, _integer(0)),
    "partition.self-balancing": Key(False, _flag),
    "partition.classes-per-partition": Key(2, _integer(1)),
    "partition.shards-per-partition": Key(2, _integer(1)),
    "partition.owner-column": Key("", _text),
    "synthetic.alpha": Key(1.0, _number()),
    "synthetic.beta": Key(1.0, _number()),
    "synthetic.devices": Key(0, _integer(0)),
    "synthetic.iid": Key(False, _flag),
    "synthetic.max-samples": Key(0, _sample_cap),
    "local-epochs": Key(2, _integer(0)),
    "local-steps": Key(0, _integer(0)),
    "lr": Key(0.1, _number()),
    "momentum": Key(0.0, _number()),
    "weight-decay": Key(0.0, _number()),
    "batch-size": Key(32, _integer(1)),
    "proximal-mu": Key(0.0, _number()),
    "device": Key("auto", _text),
    "threads": Key(0, _integer(0)),
}
"""The keys the ClientApp reads (the ServerApp reads them too: it splits and evaluates alike)."""

TRAIN_KEYS: tuple[str, ...] = (
    "local-epochs",
    "local-steps",
    "lr",
    "momentum",
    "weight-decay",
    "batch-size",
    "proximal-mu",
)
"""The training settings a task's config may carry (the server sends them with every task)."""

SCHEMA: dict[str, Key] = {
    **SERVER_KEYS,
    **NODE_KEYS,
    **{
        f"{preset}.{hyper.key}": Key(hyper.run_config_default, hyper.check)
        for preset, declaration in DECLARATIONS.items()
        for hyper in declaration.hypers
    },
}
"""Every key of the run config; a preset's keys are checked as their declarations say (their
ranges by the preset, when the server builds it)."""

DEFAULTS: dict[str, Value] = {key: spec.default for key, spec in SCHEMA.items()}
"""Every key with its default: pyproject.toml's ``[tool.flwr.app.config]`` holds the same."""


def check_keys(keys: Iterable[str]) -> None:
    """Refuse unknown keys, naming the close or the allowed ones."""
    unknown = [key for key in keys if key not in SCHEMA]
    if unknown:
        hints = "; ".join(f"{key!r}: {_hint(key)}" for key in unknown)
        raise InvalidArgument(f"unknown run config key {hints} (every key: docs/running.md)")


def _hint(key: str) -> str:
    # A key in a known table (gsgm.*, partition.*, ...) is matched within that table only.
    table = [k for k in SCHEMA if "." in key and k.startswith(key.split(".")[0] + ".")]
    close = difflib.get_close_matches(key, table or SCHEMA, n=3, cutoff=0.75)
    if close:
        return "did you mean " + " or ".join(repr(k) for k in close) + "?"
    if table:
        return "allowed: " + ", ".join(table)
    return "allowed: " + ", ".join([*SERVER_KEYS, *NODE_KEYS]) + ", <strategy>.<hyperparameter>"


def check_value(key: str, value: Any) -> Value:
    """``value`` for ``key``, checked and typed (an int becomes a float where one is asked for)."""
    return SCHEMA[key].check(f"run config {key!r}", value)


def read(key: str, *sources: Mapping[str, Any]) -> Value:
    """``key`` from the first of ``sources`` that has it (checked), else its default."""
    for source in sources:
        if key in source:
            return check_value(key, source[key])
    return SCHEMA[key].default


def check_run_config(run_config: Mapping[str, Any]) -> dict[str, Value]:
    """Every key of ``run_config`` checked, the missing ones at their defaults."""
    check_keys(run_config)
    values = {key: read(key, run_config) for key in SCHEMA}
    if values["clock.type"] == "real" and values["correlate"] != "none":
        raise InvalidArgument(
            f"run config 'correlate' = {values['correlate']!r} needs clock.type = 'virtual' "
            "(it ranks simulated speeds)"
        )
    TrainSpec.from_configs({}, values)  # local-steps and local-epochs together
    return values


@dataclass(frozen=True)
class TrainSpec:
    """How one task trains: ``epochs`` passes or ``steps`` batches, and the SGD settings."""

    epochs: int | None
    steps: int | None
    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    proximal_mu: float

    @classmethod
    def from_configs(cls, task: Mapping[str, Any], run_config: Mapping[str, Any]) -> TrainSpec:
        """Each setting from the task's config, else the run config, else its default."""
        steps = int(read("local-steps", task, run_config))
        if "local-epochs" in task and "local-steps" not in task:
            steps = 0  # the task asked for epochs: a run config's local-steps must not override it
        epochs = int(read("local-epochs", task, run_config))
        if steps == 0 and epochs < 1:
            raise InvalidArgument(
                "set local-steps >= 1, or local-steps = 0 and local-epochs >= 1; "
                f"got local-steps={steps}, local-epochs={epochs}"
            )
        return cls(
            epochs=None if steps else epochs,
            steps=steps or None,
            lr=float(read("lr", task, run_config)),
            momentum=float(read("momentum", task, run_config)),
            weight_decay=float(read("weight-decay", task, run_config)),
            batch_size=int(read("batch-size", task, run_config)),
            proximal_mu=float(read("proximal-mu", task, run_config)),
        )
