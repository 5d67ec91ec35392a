"""Imported first by the tests of ``benchmarks/blocks.py`` and of the claims study's package
(``benchmarks/claims``): it imports both as the benchmarks' scripts do, with ``benchmarks/``
on the path while they load. A test then imports from ``blocks`` and ``claims.*`` by name: the
package knows its folder, so no path is changed for the rest of the session."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    for _name in ("blocks", "claims", "claims.checks", "claims.table", "claims.verdict"):
        importlib.import_module(_name)
