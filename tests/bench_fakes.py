"""What the ``test_bench*`` files share: hand-made histories (SSGD, asynchronous runs with their
grid, runs made before the grid) and suites, a fake launcher, and the CLI's parser. No Flower."""

from __future__ import annotations

import json
from pathlib import Path

from fl_async.app.run_status import finished, write_run_status
from fl_async.bench.cli import add_arguments
from fl_async.bench.runner import SuiteSpec, run_dir
from fl_async.bench.scenarios import SCENARIOS
from fl_async.cli import main as fl_async_main
from fl_async.config import check_run_config


def _history(evaluations: list, *, steps: int, end: float, staleness: int = 0) -> dict:
    config = {"dataset": "mnist", "partition.scheme": "dirichlet", "clock.speed": "lognormal"}
    updates = [{"staleness": staleness, "accepted": 1}] * 10
    updates += [{"staleness": 9, "accepted": 0}] if staleness else []  # asynchronous: 1 rejected
    return {
        "config": {**config, "max-virtual-time": 0.0},
        "num-nodes": 4,
        "virtual-time": end,
        "wall-time": 3.0,
        "server-steps": steps,
        "stopped-by": "budget",
        "evaluations": evaluations,
        "grid-evaluations": [],
        "updates": updates,
    }


def ssgd(accuracies: list[float], step: float = 100.0) -> dict:
    """SSGD setting the budget: evaluated at every server step, one step every ``step``."""
    evaluations = [
        {
            "server-step": i,
            "accuracy": a,
            "loss": 1.0,
            "virtual-time": i * step,
            "wall-time": 2.0 * i,
            "num-updates": 4 * i,
        }
        for i, a in enumerate(accuracies)
    ]
    return _history(evaluations, steps=len(accuracies) - 1, end=(len(accuracies) - 1) * step)


def run(grid: list[float], budget: float = 400.0) -> dict:
    """An asynchronous run with its recorded grid (G = len(grid)); evaluated every 4 steps."""
    points = [
        {
            "index": i,
            "virtual-time": budget * i / len(grid),
            "server-step": 4 * i,
            "accuracy": a,
            "loss": 1.0,
            "wall-time": 3.0 * i,
            "num-updates": 4 * i,
        }
        for i, a in enumerate(grid, start=1)
    ]
    evaluations = [{"server-step": 0, "accuracy": 0.1, "virtual-time": 0.0, "wall-time": 0.0}]
    evaluations += [{k: v for k, v in p.items() if k != "index"} for p in points]
    found = _history(evaluations, steps=4 * len(grid), end=budget + 1, staleness=2)
    found["config"].update({"max-virtual-time": budget, "eval-grid": len(grid)})
    found["grid-evaluations"] = points
    return found


def old(grid: list[float]) -> dict:
    """A run made before the evaluation grid: no ``grid-evaluations``, no ``eval-grid``."""
    found = run(grid)
    del found["grid-evaluations"], found["config"]["eval-grid"]
    return found


def write_runs(out: Path, runs: dict) -> None:
    """Each ``strategy -> seed -> history`` of ``runs`` as a finished run of split dirichlet."""
    for strategy, by_seed in runs.items():
        for seed, history in by_seed.items():
            run_dir(out, "dirichlet", strategy, seed).mkdir(parents=True)
            (run_dir(out, "dirichlet", strategy, seed) / "history.json").write_text(
                json.dumps(history)
            )


SSGD = [0.1, 0.5, 0.6, 0.7, 0.8]  # derived grid of 4 over T = 400: 0.5, 0.6, 0.7, 0.8
SUITE = {
    "ssgd": {s: ssgd(SSGD) for s in (0, 1, 2)},
    "asgd": {
        0: run([0.6, 0.8, 0.7, 0.9]),
        1: run([0.6, 0.8, 0.65, 0.9]),
        2: run([0.6, 0.8, 0.75, 0.9]),
    },
    "gsgm": {
        0: run([0.6, 0.8, 0.85, 0.8]),
        1: run([0.6, 0.8, 0.8, 0.82]),
        2: run([0.7, 0.75, 0.84, 0.8]),
    },
    "fedbuff": {0: run([0.3, 0.5, 0.7, 0.85]), 1: old([0.3, 0.5, 0.7, 0.85])},
}


def spec(**changes: object) -> SuiteSpec:
    settings = dict(
        scenario=SCENARIOS["a"],
        strategies=("asgd", "ssgd"),
        seeds=(0, 1),
        dataset="mnist",
        nodes=4,
        rounds=2,
        max_virtual_time=None,
    )
    return SuiteSpec(**{**settings, **changes})  # type: ignore[arg-type]


def write_finished(output: Path, history: dict) -> None:
    """``history`` as a run's ``history.json`` and its ``run-status.json``, as the ServerApp
    writes them at a run's end."""
    path = Path(output, "history.json")
    path.write_text(json.dumps(history))
    write_run_status(Path(output), finished(history, [path]))


class FakeLaunch:
    """Stands in for the launcher: writes a history whose virtual time is known."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.configs: list[dict] = []
        self.fail = fail or set()

    def __call__(self, command: list[str], log: Path) -> int:
        from flwr.common.config import parse_config_args

        config = parse_config_args([command[command.index("--run-config") + 1]])
        self.configs.append(config)
        log.write_text("fake\n")
        if config["strategy"] in self.fail:
            return 1
        record = ssgd([0.1, 0.5, 0.7], step=100 + config["seed"])
        if config.get("eval-grid"):
            record = run([0.5] * config["eval-grid"], budget=config["max-virtual-time"])
        # every key, as the ServerApp's history has it (a record lacking a key is older than it)
        record["config"].update(check_run_config(config))
        write_finished(config["output-dir"], record)
        return 0

    def stop_all(self) -> None:
        """Nothing to stop: every fake run ends before the call returns."""


def parse(*argv: str):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def bench(*argv: str) -> int:
    """``fl-async bench ARGV``'s exit code."""
    return fl_async_main(["bench", *argv])


def hand_made_suite(out: Path) -> Path:
    """``SUITE`` (one run made before the grid) as a suite folder with a suite.json."""
    write_runs(out, SUITE)
    latest = spec(scenario=spec().scenario, grid=4).as_json()
    latest["run-config"] = {"data-root": "/home/someone/data", "local-epochs": 1}
    call = {"at": "2026-11-23T03:57:00+0000", "argv": ["/x/.venv/bin/fl-async", "bench"], **latest}
    (out / "suite.json").write_text(json.dumps({"calls": [call], "latest": latest}))
    return out


def without(value: object, dropped: frozenset[str]) -> object:
    """``value`` (nested dicts and lists) without the keys in ``dropped``, at every depth."""
    if isinstance(value, dict):
        return {k: without(v, dropped) for k, v in value.items() if k not in dropped}
    if isinstance(value, list):
        return [without(v, dropped) for v in value]
    return value


WALL_CLOCK = frozenset({"wall-time", "started-at"})
"""A record's fields that depend on the wall clock (wall times, the time a run started)."""


def pop_provenance(records: dict) -> list[dict]:
    """Take each record's ``provenance`` (what made it) out of ``records``; those taken."""
    return [
        record["run"].pop("provenance")
        for by_strategy in records.values()
        for by_seed in by_strategy.values()
        for record in by_seed.values()
    ]


def result_header(date: str) -> dict:
    """The fields a measured result starts with (``benchmarks/measured.py``'s header), made up:
    what a table's caption reads."""
    return {
        "commit": "abc1234",
        "date": date,
        "versions": "v",
        "cpus": 2,
        "load": [0.5, 0.6],
        "label": "",
    }
