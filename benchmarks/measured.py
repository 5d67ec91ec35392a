"""What a committed benchmark result carries (kind, provenance, load) and how it is written.

A benchmark calls ``header(kind)`` when it starts and ``write(result, out)`` when it ends; the
file it writes is compact (sorted keys, no per-update arrays, no logs) so that it can be
committed under ``benchmarks/results/measured/`` and rendered by ``blocks.py``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from scale import provenance


def load_average() -> float:
    """The 1-minute load average, rounded for the record."""
    return round(os.getloadavg()[0], 2)


def header(benchmark: str) -> dict[str, Any]:
    """The fields every result starts with: its kind (``benchmark``, which picks its table), the
    commit and versions measured, the UTC date, the CPUs and the load average at the start."""
    return {
        "benchmark": benchmark,
        **provenance(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "cpus": os.cpu_count(),
        "load": [load_average()],
    }


def write(result: dict[str, Any], out: str | Path) -> Path:
    """Write ``result`` (made from ``header``) to ``out``, the load average at the end appended."""
    result = {**result, "load": [*result["load"], load_average()]}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"written to {out}")
    return out
