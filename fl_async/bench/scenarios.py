"""The benchmark scenarios of issue 6 and the run config each run of a suite gets."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from fl_async.strategies import PRESETS

STRATEGIES: tuple[str, ...] = tuple(PRESETS)
"""Every strategy the bench can run (the presets' names)."""
BASELINE = "ssgd"
"""The synchronous baseline: sets the virtual-time budget and the time-to-accuracy target."""
STABILITY_BASELINE = "asgd"
"""Stability gains are reported over this strategy."""
UNLIMITED_ROUNDS = 1_000_000
"""``num-rounds`` of a run bounded by virtual time only (the update budget never binds)."""

SPLITS: dict[str, dict[str, object]] = {
    "dirichlet": {"partition.scheme": "dirichlet", "partition.alpha": 0.1},
    "label-skew": {"partition.scheme": "label_skew", "partition.classes-per-partition": 2},
    "natural": {"partition.scheme": "natural"},
}
"""The two non-IID splits of issue 6, Dirichlet(alpha=0.1) and 2 classes per node, and the
natural split of a dataset whose examples have owners (Synthetic's devices)."""


@dataclass(frozen=True)
class Scenario:
    """Nodes, splits and speed model shared by every run of a suite."""

    name: str
    description: str
    nodes: int
    splits: tuple[str, ...]
    correlate: str = "none"
    sigma: float = 1.0
    dataset: str = "mnist"
    """The dataset when ``fl-async bench`` names none."""
    settings: dict[str, object] = field(default_factory=dict)
    """Run-config keys of every run of the scenario (the user's overrides win)."""


SCENARIOS: dict[str, Scenario] = {
    "a": Scenario("a", "10 nodes, lognormal(sigma=1) speeds", 10, ("dirichlet", "label-skew")),
    "b": Scenario("b", "30 nodes, lognormal(sigma=1) speeds", 30, ("dirichlet", "label-skew")),
    # Under label-skew every node holds 2 classes, so a ranking by classes held says nothing:
    # the correlated scenario uses the Dirichlet split, where the class counts differ.
    "c": Scenario(
        "c",
        "10 nodes, lognormal(sigma=1) speeds, the fastest nodes hold the fewest classes",
        10,
        ("dirichlet",),
        correlate="few-classes-fast",
    ),
    # Synthetic's device sizes are heavy-tailed (the largest ~100x the median): with local
    # epochs one device's task would last as long as hundreds of tasks of the small ones, so a
    # task is a fixed number of local steps, as FedBuff, CA2FL and FADAS train.
    "s": Scenario(
        "s",
        "Synthetic(1, 1), 30 nodes of one device each, lognormal(sigma=1) speeds, 20 local steps",
        30,
        ("natural",),
        dataset="synthetic",
        settings={"local-steps": 20},
    ),
}


_VARIANT_NAME = re.compile(r"[a-z][a-z0-9_.+]*(-[a-z0-9_.+]+)*")


@dataclass(frozen=True)
class Variant:
    """A named preset with run-config overrides of its own, run beside the presets in a suite
    (e.g. ``gsgm-m0``: ``gsgm`` with ``gsgm.momentum=0.0``)."""

    name: str
    preset: str
    overrides: dict[str, object] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        """The variant as written to ``suite.json``."""
        return {"preset": self.preset, "run-config": dict(self.overrides)}


def check_variant_name(name: str) -> str:
    """``name`` if it can name a variant: lower-case letters, digits and ``_ . + -``, starting
    with a letter, not a preset's name and without ``-seed`` (run folders end in it)."""
    if name in STRATEGIES:
        raise ValueError(f"variant name {name!r} is a preset's name; choose another")
    if not _is_variant_name(name):
        raise ValueError(
            f"bad variant name {name!r}; allowed: lower-case letters, digits and _ . + -, "
            "starting with a letter, without '-seed'"
        )
    return name


def is_run_name(name: str) -> bool:
    """Whether ``name`` can name a suite's runs: a preset or a variant."""
    return name in STRATEGIES or _is_variant_name(name)


def _is_variant_name(name: str) -> bool:
    """The form of a variant's name; ``-seed`` is kept out because run folders end in it."""
    return bool(_VARIANT_NAME.fullmatch(name)) and "-seed" not in name


def preset_of(name: str) -> str:
    """The preset a run name starts with (``gsgm-m0`` -> ``gsgm``), for ordering; else ``name``."""
    head = name.split("-")[0]
    return head if head in STRATEGIES else name


def eval_every(strategy: str, nodes: int, buffer_size: int | None = None) -> int:
    """Server steps between evaluations: every strategy is evaluated once per ``nodes`` updates.

    SSGD and OD-SGD take one server step per ``nodes`` updates, FedBuff one per buffer
    (``min(10, nodes)`` by default), the other rules one per update.
    """
    if strategy in ("ssgd", "odsgd"):
        return 1
    if strategy == "fedbuff":
        return max(1, nodes // (buffer_size or min(10, nodes)))
    return nodes


def run_config(
    *,
    strategy: str,
    seed: int,
    scenario: Scenario,
    split: str,
    nodes: int,
    dataset: str,
    num_rounds: int,
    max_virtual_time: float | None,
    extra: dict[str, object],
    eval_grid: int | None = None,
) -> dict[str, object]:
    """The run config of one run (``extra``, the user's overrides, win); ``eval_grid`` G adds
    ``eval-grid`` (the comparison grid over ``max_virtual_time``)."""
    buffer_size = extra.get("fedbuff.buffer-size")
    config: dict[str, object] = {
        "strategy": strategy,
        "seed": seed,
        "dataset": dataset,
        "num-nodes": nodes,
        "num-rounds": num_rounds,
        "max-virtual-time": float(max_virtual_time or 0.0),
        "eval-every": eval_every(
            strategy, nodes, buffer_size if isinstance(buffer_size, int) else None
        ),
        "clock.type": "virtual",
        "clock.speed": "lognormal",
        "clock.sigma": scenario.sigma,
        "correlate": scenario.correlate,
        **SPLITS[split],
        **scenario.settings,
    }
    if eval_grid:
        # Left out otherwise: a run config without it matches a run made before the grid.
        config["eval-grid"] = eval_grid
    config.update(extra)
    return config


def to_run_config_text(config: dict[str, object]) -> str:
    """``config`` as ``flwr run --run-config`` text (strings quoted, floats keep their point)."""
    return " ".join(f"{key}={_toml(value)}" for key, value in config.items())


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def replace_splits(scenario: Scenario, splits: tuple[str, ...]) -> Scenario:
    """``scenario`` restricted to ``splits``."""
    return dataclasses.replace(scenario, splits=splits)
