"""benchmarks/readme_tests.py measures the command CI runs, and reads pytest's report."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ on sys.path only while the module and its sibling imports load, as
# test_measured_tables does for scale.py: the rest of the session keeps its own path.
with pytest.MonkeyPatch.context() as _patch:
    _patch.syspath_prepend(str(ROOT / "benchmarks"))
    readme_tests = importlib.import_module("readme_tests")


def test_the_measured_command_is_the_one_ci_runs() -> None:
    command = readme_tests.readme_test_command(ROOT / "README.md")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert command == ci
    assert command.split(" && ")[-1] == ".venv/bin/python -m pytest"


def test_pytest_summary_and_slowest_phases_are_read_from_its_output() -> None:
    output = "\n".join(
        [
            "============================= slowest 15 durations =============================",
            "115.67s call     tests/test_bench_slow.py::test_a_tiny_suite",
            "4.64s teardown tests/test_strategy_simulation.py::test_resume",
            "(3 durations < 0.005s hidden.  Use -vv to show these durations.)",
            "=============== 1397 passed, 265 warnings in 505.32s (0:08:25) ================",
        ]
    )
    found = readme_tests.pytest_figures(output)
    assert found["summary"] == "1397 passed, 265 warnings in 505.32s (0:08:25)"
    assert found["slowest"] == [
        ["tests/test_bench_slow.py::test_a_tiny_suite", "call", 115.67],
        ["tests/test_strategy_simulation.py::test_resume", "teardown", 4.64],
    ]
