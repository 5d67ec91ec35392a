"""A sweep's grid file: the hyperparameter values each strategy is tried with.

A grid file (TOML, or JSON with the same structure) names, per strategy, each hyperparameter of
its preset (the ``<strategy>.*`` run-config keys, without the prefix) and the values to try; a
strategy's points are every combination, in the file's order::

    tie-margin = 0.5          # accuracy points (the selection rule, fl_async.bench.tuning)

    [grid.asgd]
    lr = ["auto", 0.05, 0.2, 0.4]

Every strategy gets a grid of the same size, so that none is tuned harder than another. Each
point runs as a variant of its preset named after its values (``asgd-lr0.05``); the point at
the preset's own defaults runs as the preset itself (``asgd``), so "auto" sits beside the tuned
points and SSGD's budget run is not made twice.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fl_async.bench.scenarios import STRATEGIES, Variant, check_variant_name
from fl_async.config import PRESET_TABLES, check_value
from fl_async.validation import InvalidArgument

FILE_KEYS = ("description", "tie-margin", "grid")
"""The top-level keys of a grid file."""
Value = bool | int | float | str


class GridError(InvalidArgument):
    """A grid file that cannot be swept; the message names the file and the bad entry."""


@dataclass(frozen=True)
class SweepGrid:
    """A grid file as read: strategy -> hyperparameter -> values, and the tie margin."""

    path: Path
    grid: dict[str, dict[str, tuple[Value, ...]]]
    tie_margin: float = 0.0
    """Points whose mean final accuracy is within this many accuracy points of the best tie."""
    description: str = ""

    def size(self) -> int:
        """The points of every strategy's grid (the same for all: ``load_grid`` checks it)."""
        return _size(next(iter(self.grid.values())))

    def points(self, strategy: str) -> list[dict[str, Value]]:
        """The strategy's points as run-config overrides (``asgd.lr``), in the file's order."""
        keys = list(self.grid[strategy])
        combos = itertools.product(*(self.grid[strategy][key] for key in keys))
        return [{f"{strategy}.{k}": v for k, v in zip(keys, c, strict=True)} for c in combos]

    def as_json(self) -> dict[str, Any]:
        """The grid as declared, for the tuned record."""
        return {s: {k: list(v) for k, v in keys.items()} for s, keys in self.grid.items()}


def load_grid(path: Path) -> SweepGrid:
    """Read and check a grid file: known top-level keys, each strategy's hyperparameters known
    to its preset (when the preset exists here: ``check_strategies`` says which do not), each
    with a non-empty list of distinct values, and every strategy's grid of the same size."""
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as error:
        raise GridError(f"--sweep {path}: cannot read it: {error}") from error
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise GridError(f"--sweep {path}: unknown keys {', '.join(unknown)}; allowed: {FILE_KEYS}")
    grid = raw.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise GridError(f"--sweep {path}: no [grid.<strategy>] table")
    checked = {str(s).lower(): _strategy_grid(path, str(s), keys) for s, keys in grid.items()}
    sizes = {strategy: _size(keys) for strategy, keys in checked.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{s} {n}" for s, n in sizes.items())
        raise GridError(
            f"--sweep {path}: every strategy must get a grid of the same size, got {listed} points"
        )
    margin = raw.get("tie-margin", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < 100:
        raise GridError(f"--sweep {path}: tie-margin must be a number of points in [0, 100)")
    return SweepGrid(path, checked, float(margin), str(raw.get("description", "")))


def _strategy_grid(path: Path, strategy: str, keys: object) -> dict[str, tuple[Value, ...]]:
    """One strategy's table, checked (its keys against its preset where the preset exists)."""
    where = f"--sweep {path}: [grid.{strategy}]"
    if not isinstance(keys, dict) or not keys:
        raise GridError(f"{where} must name one hyperparameter or more, e.g. lr = [0.05, 0.1]")
    known = PRESET_TABLES.get(strategy.lower())
    found = {}
    for key, values in keys.items():
        if known is not None and key not in known:
            raise GridError(f"{where}: unknown hyperparameter {key!r}; allowed: {', '.join(known)}")
        if not isinstance(values, list) or not values:
            raise GridError(f"{where}: {key} must be a non-empty list of values")
        if not all(isinstance(v, bool | int | float | str) for v in values):
            raise GridError(f"{where}: {key} values must be numbers, true/false or strings")
        if known is not None:
            _check_values(where, f"{strategy.lower()}.{key}", values)
        if len(set(map(repr, values))) < len(values):
            raise GridError(f"{where}: {key} lists a value twice: {values}")
        found[str(key)] = tuple(values)
    return found


def _check_values(where: str, key: str, values: list) -> None:
    """Each value as the run config will check it (its declaration says how), before any run:
    the values themselves are kept, as they name the points."""
    for value in values:
        try:
            check_value(key, value)
        except InvalidArgument as error:
            raise GridError(f"{where}: {error}") from None


def _size(keys: dict[str, tuple[Value, ...]]) -> int:
    size = 1
    for values in keys.values():
        size *= len(values)
    return size


def check_strategies(grid: SweepGrid, chosen: tuple[str, ...] | None) -> tuple[str, ...]:
    """The strategies to sweep: ``chosen`` (``--strategies``; every one in the grid file) or
    the whole file; every one must be a preset of this fl-async."""
    names = tuple(grid.grid) if chosen is None else chosen
    outside = [n for n in names if n not in grid.grid]
    if outside:
        raise GridError(
            f"--strategies {', '.join(outside)} not in {grid.path}; it has {', '.join(grid.grid)}"
        )
    missing = [n for n in names if n not in STRATEGIES]
    if missing:
        raise GridError(
            f"{grid.path} sweeps {', '.join(missing)}, which this fl-async has no preset for "
            f"(it has {', '.join(STRATEGIES)}); sweep the others with --strategies"
        )
    return names


def point_name(strategy: str, overrides: dict[str, Value]) -> str:
    """The run name of a point: the preset's own at its defaults, else ``<strategy>-<key><value>``
    per hyperparameter (``gsgm-lr0.01-momentum0.8``)."""
    defaults = PRESET_TABLES[strategy]
    keys = {key.partition(".")[2]: value for key, value in overrides.items()}
    if all(_same(defaults[key], value) for key, value in keys.items()):
        return strategy
    name = "-".join([strategy, *(f"{key}{_text(value)}" for key, value in keys.items())])
    try:
        return check_variant_name(name)
    except ValueError as error:
        raise GridError(f"a point of {strategy} cannot name its runs: {error}") from error


def sweep_variants(grid: SweepGrid, strategies: tuple[str, ...]) -> dict[str, Variant]:
    """Every point of the strategies' grids, by run name (a point at the preset's defaults is
    the preset itself, with no overrides)."""
    found: dict[str, Variant] = {}
    for strategy in strategies:
        for overrides in grid.points(strategy):
            name = point_name(strategy, overrides)
            found[name] = Variant(name, strategy, {} if name == strategy else overrides)
    return found


def _same(default: object, value: Value) -> bool:
    """Equal as settings: 1 is 1.0, but "1" is not 1 and true is not 1."""
    kinds = (str, bool)
    return default == value and all(isinstance(default, k) == isinstance(value, k) for k in kinds)


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value).lower()
