"""What a rule declares once: its hyperparameters (``Hyper``) and the one-line facts of its
preset (``Declaration``), from which the run config, the presets' defaults and the docs' tables
are derived."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from fl_async.validation import InvalidArgument

Default = bool | int | float | str | None
"""A hyperparameter's default in Python; None leaves it to the rule ("default" in the run
config)."""

PRESET_DEFAULT = "default"
"""The run config's spelling of None: the hyperparameter keeps the preset's default."""
AUTO = "auto"
"""A value resolved at start from N, the number of nodes (docs/algorithms.md, Safe defaults
for presets)."""

_KINDS: dict[str, tuple[str, ...]] = {
    "number": ("a number",),
    "integer": ("an integer",),
    "flag": ("true", "false"),
    "choice": (),  # its choices
    "text": ("a string",),
}


@dataclass(frozen=True)
class Values:
    """Which values a hyperparameter takes: its kind (the choices of a ``choice``) and whether
    ``"auto"`` is one. The run config checks each value against it; the ranges are the rule's
    to check when the preset is built, as its arithmetic needs them."""

    kind: Literal["number", "integer", "flag", "choice", "text"]
    choices: tuple[str, ...] = ()
    auto: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise InvalidArgument(f"kind must be one of {list(_KINDS)}, got {self.kind!r}")
        if bool(self.choices) != (self.kind == "choice"):
            raise InvalidArgument(f"choices go with kind 'choice' only, got {self!r}")

    def describe(self, *more: str) -> str:
        """The values in words, ``more`` strings besides: ``a number or 'auto'``, ``one of
        'sgd', 'adam'``."""
        extra = ((AUTO,) if self.auto else ()) + more
        if self.kind == "choice":
            return "one of " + ", ".join(repr(value) for value in (*self.choices, *extra))
        parts = [*_KINDS[self.kind], *(repr(value) for value in extra)]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is of this kind (``"auto"`` aside)."""
        number = isinstance(value, (int, float, np.integer, np.floating))
        number = number and not isinstance(value, (bool, np.bool_))
        return {
            "number": number and not math.isnan(value),
            "integer": number and isinstance(value, (int, np.integer)),
            "flag": isinstance(value, (bool, np.bool_)),
            "choice": isinstance(value, str) and value in self.choices,
            "text": isinstance(value, str),
        }[self.kind]


def choice(*choices: str, auto: bool = False) -> Values:
    """One of ``choices`` (strings)."""
    return Values("choice", choices, auto)


NUMBER = Values("number")
"""Any number but NaN (an int or a float; its range is the rule's to check)."""
NUMBER_OR_AUTO = Values("number", auto=True)
"""A number, or ``"auto"``: resolved from N at start."""
INTEGER = Values("integer")
"""Any integer (its range is the rule's to check)."""
INTEGER_OR_AUTO = Values("integer", auto=True)
"""An integer, or ``"auto"``: resolved from N at start."""
FLAG = Values("flag")
"""True or false."""
TEXT = Values("text")
"""Any string (a path: the rule checks it)."""


@dataclass(frozen=True)
class Hyper:
    """One hyperparameter of a preset: its keyword, its default, its values and its meaning."""

    name: str
    """The preset's keyword (snake_case); the run-config key hyphenates it."""
    default: Default
    """The preset's default (None: the preset decides, "default" in the run config)."""
    values: Values
    """What the run config accepts for it, besides ``"default"``."""
    doc: str
    """One line for the docs' tables: what the value means (its values are ``values``')."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise InvalidArgument(f"a hyperparameter's name must be snake_case, got {self.name!r}")
        if not isinstance(self.default, (bool, int, float, str, type(None))):
            raise InvalidArgument(
                f"{self.name}'s default must be a bool, number, string or None, "
                f"got {self.default!r}"
            )
        if self.default is not None and not self._admits(self.default):
            raise InvalidArgument(
                f"{self.name}'s default {self.default!r} is not {self.values.describe()}"
            )

    @property
    def allowed(self) -> str:
        """Its values in the run config, in words: ``"default"`` is one of every key's."""
        return self.values.describe(PRESET_DEFAULT)

    def _admits(self, value: Any) -> bool:
        return (self.values.auto and value == AUTO) or self.values.admits(value)

    def check(self, name: str, value: Any) -> bool | int | float | str:
        """``value`` for the run-config key ``name``, checked (``"default"`` keeps the preset's
        default); an int is cast where the default is a float (TOML writes 1 for 1.0), every
        other value is kept as it is."""
        if not (value == PRESET_DEFAULT or self._admits(value)):
            raise InvalidArgument(f"{name} must be {self.allowed}, got {value!r}")
        if isinstance(self.default, float) and isinstance(value, (int, np.integer)):
            return float(value)
        return value

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
    """Its keywords, in the order of the preset's signature."""

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
