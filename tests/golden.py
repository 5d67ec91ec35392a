"""Seeded histories of every preset on the in-memory grid, kept as the reference a refactor
must reproduce bit for bit (``tests/golden/histories.json``; numpy only, no torch).

Regenerate (only when a change of results is intended, and say why in the commit):
``python tests/golden.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, MetricRecord

from fl_async.scheduling import VirtualClock
from fl_async.strategies import PRESETS

GOLDEN = Path(__file__).parent / "golden" / "histories.json"

SCENARIOS: dict[str, dict[str, Any]] = {
    # Five healthy nodes, every task on the current model.
    "five-nodes": {
        "nodes": 5,
        "fleet_seed": 3,
        "clock": {"seed": 7},
        "strategy": {},
        "modes": {},
        "rounds": 4,
    },
    # Six nodes, three tasks in flight at once, jittered durations, one node that replies
    # with its pseudo-gradient instead of trained weights.
    "six-nodes-capped": {
        "nodes": 6,
        "fleet_seed": 5,
        "clock": {"seed": 2, "jitter": 0.3},
        "strategy": {"max_in_flight": 3},
        "modes": {4: "pseudo"},
        "rounds": 3,
    },
}

RECORDED_WITH: dict[str, dict[str, Any]] = {
    "dcasgd": {"lr": "auto"},
    "fedbuff": {"lr": 1.0},
    "trendsmooth": {"lr": "auto"},
}
"""The defaults of the time for the presets whose default rate the claims study changed after
the goldens were recorded (docs/algorithms.md, Safe defaults for presets): the goldens keep them."""


def _clean(record: MetricRecord) -> dict[str, Any]:
    return {k: v for k, v in dict(record).items() if k != "wall-time"}


def _hash(arrays: list[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def record(preset: str, scenario: str, **options: Any) -> dict[str, Any]:
    """The whole seeded history of ``preset`` in ``scenario``, as plain JSON values
    (``options``: more keyword arguments of the strategy, e.g. ``send_ahead``)."""
    spec = SCENARIOS[scenario]
    nodes = quadratic_fleet(spec["nodes"], seed=spec["fleet_seed"], modes=spec["modes"])
    target = np.mean([n.target for n in nodes.values()], axis=0).astype(np.float64)

    def evaluate(step: int, arrays) -> MetricRecord:
        w = arrays.to_numpy_ndarrays()[0].astype(np.float64)
        return MetricRecord({"loss": float(0.5 * np.sum((w - target) ** 2))})

    strategy = PRESETS[preset](
        clock=VirtualClock(**spec["clock"]),
        min_nodes=spec["nodes"],
        seed=11,
        **spec["strategy"],
        **{**RECORDED_WITH.get(preset, {}), **options},
    )
    with task_identity():
        result = strategy.start(
            FakeGrid(nodes, delay_seed=1),
            initial_arrays(),
            num_rounds=spec["rounds"],
            timeout=60,  # a bound only: a starved test process must not time a task out
            train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}),
            evaluate_fn=evaluate,
        )
    return {
        "updates": [_clean(r) for _, r in sorted(result.train_metrics_clientapp.items())],
        "evaluations": {
            str(k): _clean(r) for k, r in sorted(result.evaluate_metrics_serverapp.items())
        },
        "arrays-sha256": _hash(result.arrays.to_numpy_ndarrays()),
        "num-updates": result.num_updates,
        "server-steps": result.server_steps,
        "virtual-time": result.virtual_time,
        "stopped-by": result.stopped_by,
        "faults": dict(result.faults),
        "rejected": dict(result.rejected),
    }


def record_all() -> dict[str, dict[str, Any]]:
    """Every preset in every scenario, keyed ``"<preset>/<scenario>"``."""
    return {f"{p}/{s}": record(p, s) for p in sorted(PRESETS) for s in SCENARIOS}


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(record_all(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
