"""The table of each benchmark kind, one module per kind.

A module here (its name not starting with ``_``) renders the results of one benchmark: it names
the kind in ``BENCHMARK`` (the result's ``benchmark`` field) and turns a result into Markdown
with ``table(result) -> str``. Adding a kind is adding a module; ``renderers()`` finds it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

Renderer = Callable[[dict], str]


def renderers() -> dict[str, Renderer]:
    """Every module's ``table``, keyed by its ``BENCHMARK``."""
    found: dict[str, Renderer] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = module.BENCHMARK
        if kind in found:
            raise ValueError(f"two table modules render benchmark {kind!r}")
        found[kind] = module.table
    return found
