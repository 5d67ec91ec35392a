"""The docs' tables and pyproject.toml's sections, written from the declarations: the
generated blocks of docs/running.md and docs/strategies.md (``benchmarks/blocks.py`` rewrites
and checks them) and each preset's ``[tool.flwr.app.config.<preset>]``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from fl_async.hyperparameters.declaration import Declaration
from fl_async.validation import InvalidArgument


def toml_value(value: bool | int | float | str) -> str:
    """``value`` as TOML writes it (``true``, ``0.9``, ``1e-08``, ``"auto"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a basic TOML string: the same escapes as JSON's
    return repr(value)


def run_config_table(declarations: Mapping[str, Declaration]) -> str:
    """Every ``<preset>.<key>`` with its default, its values and its meaning (docs/running.md)."""
    rows = [
        f"| `{name}.{hyper.key}` | `{toml_value(hyper.run_config_default)}` | "
        f"{hyper.values.describe()} | {hyper.doc} |"
        for name, declaration in declarations.items()
        for hyper in declaration.hypers
    ]
    return "\n".join(["| key | default | values | meaning |", "|---|---|---|---|", *rows])


def presets_table(declarations: Mapping[str, Declaration]) -> str:
    """Each preset with its keywords, aggregator, dispatch and ``"auto"`` (docs/strategies.md)."""
    rows = []
    for declaration in declarations.values():
        keywords = ", ".join(hyper.name for hyper in declaration.hypers)
        rows.append(
            f"| `{declaration.preset}({keywords})` | `{declaration.aggregator}` | "
            f"{declaration.dispatch} | {declaration.auto} |"
        )
    head = ['| preset | aggregator | dispatch policy | `lr="auto"` |', "|---|---|---|---|"]
    return "\n".join([*head, *rows])


def toml_section(declaration: Declaration) -> str:
    """The preset's ``[tool.flwr.app.config.<preset>]`` as pyproject.toml holds it."""
    lines = [f"[tool.flwr.app.config.{declaration.name}]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in declaration.table.items()]
    return "\n".join(lines)


TABLES: dict[str, Callable[[Mapping[str, Declaration]], str]] = {
    "run-config": run_config_table,
    "presets": presets_table,
}
"""The docs' tables by the name their block's marker gives."""


def table(name: str, declarations: Mapping[str, Declaration]) -> str:
    """The table ``name`` of ``TABLES``, written from ``declarations``."""
    if name not in TABLES:
        raise InvalidArgument(f"no declared table {name!r}; tables: {', '.join(TABLES)}")
    return TABLES[name](declarations)
