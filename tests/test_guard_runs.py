"""benchmarks/guard_runs.py: a run's refusals, departures and the reach of its honest updates
over both references of the update guard, and its table."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from bench_fakes import result_header

ROOT = Path(__file__).resolve().parents[1]
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    guard_runs = importlib.import_module("guard_runs")
    guard_table = importlib.import_module("tables.guard_runs")


def _run(folder: Path, updates: list[tuple[int, float | None, bool]], log: str = "") -> None:
    """A finished run: its history (``updates``: node, norm or None, accepted) and its log."""
    folder.mkdir(parents=True)
    records = [
        {"stable-id": node, "accepted": int(ok), **({} if n is None else {"update-norm": n})}
        for node, n, ok in updates
    ]
    refused = sum(not ok for _, _, ok in updates)
    history = {
        "updates": records,
        "num-nodes": 3,
        "final-accuracy": 0.9123,
        "rejected": {"too-large": refused} if refused else {},
    }
    (folder / "history.json").write_text(json.dumps(history))
    (folder / "run.log").write_text(log)


def test_a_fast_node_sets_the_median_of_updates_not_of_nodes(tmp_path: Path) -> None:
    # Node 0 sends 20 small updates; nodes 1 and 2, with more data, one large one each.
    _run(
        tmp_path / "suite" / "dirichlet" / "asgd-seed0",
        [(0, 1.0, True)] * 20 + [(1, 15.0, True), (2, 15.0, True)],
    )
    result = guard_runs.suite_result(tmp_path / "suite")["dirichlet/asgd-seed0"]
    # 15 over a median of 1, twice (nodes 1 and 2)
    assert result["per-update"] == {"max": 15.0, "over": 2, "over-nodes": 2}
    assert result["per-node"] == {"max": 15.0, "over": 1, "over-nodes": 1}  # then median 8
    assert result["updates"] == 22 and result["refused"] == 0 and result["left"] == 0


def test_refusals_and_departures_are_counted_and_runs_without_norms_reach_nothing(
    tmp_path: Path,
) -> None:
    log = (
        "node with stable id 1 leaves the run after 5 failed tasks ...\n"
        "node with stable id 2 leaves the run after 5 failed tasks ...\n"
        "node with stable id 1 leaves the run after 5 failed tasks ...\n"  # again, after a return
    )
    _run(
        tmp_path / "old" / "dirichlet" / "asgd-seed30",
        [(0, None, True), (1, None, False), (2, None, False)],
        log,
    )
    found = guard_runs.suite_result(tmp_path / "old")["dirichlet/asgd-seed30"]
    assert found == {
        "refused": 2,
        "refused-nodes": 2,
        "left": 2,
        "nodes": 3,
        "final-accuracy": 91.2,
        "updates": 3,
    }
    result = {
        **result_header("2026-11-27"),
        "factor": 10.0,
        "window": 50,
        "suites": {"old": {"dirichlet/asgd-seed30": found}},
    }
    assert "| old | dirichlet | asgd-seed30 | 2 (2 nodes) | 2 of 3 | 91.2 | 3 | – | – |" in (
        guard_table.table(result)
    )


def test_refusals_of_one_node_say_so_and_a_result_without_counts_still_renders(
    tmp_path: Path,
) -> None:
    _run(
        tmp_path / "s" / "dirichlet" / "ssgd-seed0",
        [(0, 1.0, True), (1, 1.0, True), (2, 30.0, False), (2, 40.0, False)],
    )
    found = guard_runs.suite_result(tmp_path / "s")["dirichlet/ssgd-seed0"]
    assert found["refused-nodes"] == 1 and found["per-node"]["over-nodes"] == 1
    older = {k: v for k, v in found.items() if k not in ("refused-nodes", "per-node")}
    runs = {"dirichlet/ssgd-seed0": found, "dirichlet/ssgd-seed1": older}
    result = {
        **result_header("2026-11-27"),
        "factor": 10.0,
        "window": 50,
        "suites": {"s": runs},
    }
    text = guard_table.table(result)
    assert (
        "| s | dirichlet | ssgd-seed0 | 2 (1 node) | 0 of 3 | 91.2 | 4 | 40.0 / 2 (1 node) "
        "| 40.0 / 2 (1 node) |" in text
    )
    assert "| s | dirichlet | ssgd-seed1 | 2 | 0 of 3 | 91.2 | 4 | 40.0 / 2 (1 node) | – |" in text


def test_refused_nodes_are_not_counted_when_other_refusals_are_mixed_in(tmp_path: Path) -> None:
    folder = tmp_path / "s" / "dirichlet" / "asgd-seed0"
    _run(folder, [(0, 1.0, True), (1, 30.0, False), (2, 1.0, False)])
    history = json.loads((folder / "history.json").read_text())
    history["rejected"] = {"too-large": 1, "too-stale": 1}  # node 2's refusal was another kind
    (folder / "history.json").write_text(json.dumps(history))
    found = guard_runs.suite_result(tmp_path / "s")["dirichlet/asgd-seed0"]
    assert found["refused"] == 1 and found["refused-nodes"] is None
