"""benchmarks/churn.py's schedule and checks, on hand-made histories and samples (the run itself,
15 minutes of SuperNodes killed and restarted, is ``python benchmarks/churn.py``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("churn", ROOT / "benchmarks" / "churn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


churn = _load()


def test_the_schedule_is_seeded_spaced_and_ends_before_the_budget() -> None:
    plan = churn.schedule(seed=0, nodes=6, duration=900.0, every=60.0, down=15.0)
    assert plan == churn.schedule(seed=0, nodes=6, duration=900.0, every=60.0, down=15.0)
    assert plan != churn.schedule(seed=1, nodes=6, duration=900.0, every=60.0, down=15.0)
    assert len(plan) == 14 and {p["partition"] for p in plan} <= set(range(6))
    for kill, after in zip(plan, plan[1:], strict=False):
        assert kill["at"] < kill["restart"] < after["at"]  # back up before the next kill
    assert all(7.5 <= p["restart"] - p["at"] <= 22.5 for p in plan)
    assert plan[-1]["restart"] < 900.0


def update(node: int, step: int, staleness: int, accepted: int = 1) -> dict:
    return {"node-id": node, "server-step": step, "staleness": staleness, "accepted": accepted}


def test_an_update_applied_twice_is_found_by_node_and_base_version() -> None:
    once = [update(7, 1, 0), update(8, 2, 1), update(7, 3, 1), update(8, 3, 0, accepted=0)]
    assert churn.applied_twice(once) == [] and churn._steps_once(once)
    twice = [*once, update(7, 4, 2)]  # node 7's task on base 1 again (step 4 - 1 - 2)
    assert churn.applied_twice(twice) == [[7, 1]]
    assert not churn._steps_once([update(7, 1, 0), update(8, 1, 0)])


def test_memory_growth_compares_the_first_and_last_quarters() -> None:
    samples = [[t, 500.0 + t, None if t < 2 else 100.0] for t in range(12)]
    growth = churn.memory_growth(samples, 1)
    assert (growth["first-quarter-max"], growth["last-quarter-max"], growth["growth"]) == (
        502.0,
        511.0,
        9.0,
    )
    assert churn.memory_growth(samples, 2)["growth"] == 0.0
    assert churn.memory_growth(samples[:3], 1)["growth"] is None


@pytest.mark.parametrize(
    "argv, message",
    [(["--down", "70"], "--down must lie in"), (["--nodes", "0"], "--nodes must be > 0")],
)
def test_bad_arguments_are_refused_naming_them(argv, message) -> None:
    with pytest.raises(SystemExit, match=message):
        churn._check_args(churn._parser().parse_args(argv))


@pytest.mark.slow(seconds=50)
def test_a_short_churn_run_kills_restarts_and_leaves_no_process(tmp_path) -> None:
    """Two SuperNodes for 20 s, one killed at about 11 s and back 2 s later: the run reaches its
    budget, nothing is applied twice, every process is gone. (Whether it applies updates at all
    in 20 s depends on the machine's load: the 15-minute run checks that.)"""
    out = tmp_path / "churn.json"
    short = {"duration": 20.0, "every": 10.0, "down": 4.0}
    assert len(churn.schedule(seed=0, nodes=2, **short)) == 1  # what the run below does
    churn.main(
        [
            "--nodes",
            "2",
            "--duration",
            str(short["duration"]),
            "--kill-every",
            str(short["every"]),
            "--down",
            str(short["down"]),
            "--sample-every",
            "2",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ]
    )
    result = json.loads(out.read_text())
    checks = result["checks"]
    assert checks["reached-budget"] and checks["no-update-applied-twice"], result["run"]
    assert checks["no-process-left"] and result["processes-left-after-stop"] == []
    assert (result["kills"], result["restarts"]) == (1, 1)
    assert result["memory-mib"]["superlink"]["growth"] is not None
