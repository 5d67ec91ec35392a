"""What a rule declares once: its hyperparameters (``Hyper``) and the one-line facts of its
preset (``Declaration``), from which the run config, the presets' defaults and the docs' tables
are derived."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fl_async.validation import InvalidArgument

Default = bool | int | float | str | None
"""A hyperparameter's default in Python; None leaves it to the rule ("default" in the run
config)."""

PRESET_DEFAULT = "default"
"""The run config's spelling of None: the hyperparameter keeps the preset's default."""


@dataclass(frozen=True)
class Hyper:
    """One hyperparameter of a preset: its keyword, its default and what it means."""

    name: str
    """The preset's keyword (snake_case); the run-config key hyphenates it."""
    default: Default
    doc: str
    """One line for the docs' tables: what the value means and which values are allowed."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise InvalidArgument(f"a hyperparameter's name must be snake_case, got {self.name!r}")
        if not isinstance(self.default, (bool, int, float, str, type(None))):
            raise InvalidArgument(
                f"{self.name}'s default must be a bool, number, string or None, "
                f"got {self.default!r}"
            )

    @property
    def key(self) -> str:
        """The run-config key within the preset's table (``lr-schedule``)."""
        return self.name.replace("_", "-")

    @property
    def run_config_default(self) -> bool | int | float | str:
        """The default as the run config writes it ("default" for None: TOML has no null)."""
        return PRESET_DEFAULT if self.default is None else self.default


@dataclass(frozen=True)
class Declaration:
    """A rule's one declaration: its preset, its aggregator, its dispatch, its hyperparameters."""

    name: str
    """The preset's run-config name (``strategy = "mifa"``), its class name lower-cased."""
    preset: str
    """The preset's class in ``fl_async.strategies`` (``MIFA``)."""
    aggregator: str
    """The aggregator it steps with, in ``fl_async.aggregators``."""
    dispatch: str
    """Its dispatch policy, in a few words."""
    auto: str
    """What its ``"auto"`` values resolve to with N nodes (or what stands in for them)."""
    hypers: tuple[Hyper, ...]

    def __post_init__(self) -> None:
        if self.name != self.preset.lower():
            raise InvalidArgument(
                f"a preset's run-config name is its class name lower-cased: "
                f"{self.preset!r} needs {self.preset.lower()!r}, got {self.name!r}"
            )
        names = [hyper.name for hyper in self.hypers]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidArgument(f"{self.preset} declares {repeated} more than once")

    @property
    def defaults(self) -> Mapping[str, Any]:
        """Each keyword's Python default (None: the rule's own), read-only: the preset's
        signature takes its defaults from here."""
        return MappingProxyType({hyper.name: hyper.default for hyper in self.hypers})

    @property
    def table(self) -> dict[str, bool | int | float | str]:
        """The preset's run-config table: each hyphenated key with its default."""
        return {hyper.key: hyper.run_config_default for hyper in self.hypers}


def registry(*groups: tuple[Declaration, ...]) -> dict[str, Declaration]:
    """Every declaration by name, in the order given; a name declared twice is refused."""
    found: dict[str, Declaration] = {}
    for declaration in (d for group in groups for d in group):
        if declaration.name in found:
            raise InvalidArgument(f"the rule {declaration.name!r} is declared twice")
        found[declaration.name] = declaration
    return found
