"""benchmarks/claims_budget.py: the budget rule read off one long SSGD run per seed, as the
claims block reads it off the evaluation runs, and its table."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from bench_fakes import result_header, ssgd

ROOT = Path(__file__).resolve().parents[1]
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    claims_budget = importlib.import_module("claims_budget")
    budget_table = importlib.import_module("tables.claims_budget")


def _long_ssgd(split: Path, seed: int, accuracies: list[float]) -> None:
    history = ssgd(accuracies)
    history["dataset"] = {"name": "mnist", "test-examples": 1000}
    history["config"].update({"dataset": "mnist", "num-nodes": 4})
    (split / f"ssgd-seed{seed}").mkdir(parents=True)
    (split / f"ssgd-seed{seed}" / "history.json").write_text(json.dumps(history))


def test_the_rule_picks_the_first_budget_whose_curve_is_flat(tmp_path: Path) -> None:
    split = tmp_path / "suite" / "dirichlet"
    # seed 0 climbs 10 points a round for 8 rounds, then stays; seed 1 for 6 rounds. A grid
    # quarter of R = 16 rounds spans 4 rounds: 12..16 are flat for both, 8..12 not for seed 0.
    climbing = [0.1 + 0.1 * min(r, 8) for r in range(17)]
    _long_ssgd(split, 0, climbing)
    _long_ssgd(split, 1, [0.1 + 0.1 * min(r, 6) for r in range(17)])
    found = claims_budget.split_result(split, step=4)
    assert found["rounds"] == [4, 8, 12, 16]
    assert [a["flatness"] for a in found["seeds"]["0"]] == [10.0, 20.0, 9.0, 0.0]
    assert found["mean"] == [10.0, 16.5, 4.5, 0.0]
    assert found["chosen"] == 16
    assert found["seeds"]["1"][3] == {"flatness": 0.0, "final": 70.0}
    result = {
        **result_header("2026-11-27"),
        "threshold": 1.0,
        "splits": {"suite/dirichlet": found},
    }
    text = budget_table.table(result)
    assert "the rule chooses R = 16." in text
    assert "| 16 (chosen) | +0.0 | +0.0 / 90.0% | +0.0 / 70.0% |" in text
