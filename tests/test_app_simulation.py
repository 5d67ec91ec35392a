"""The whole Flower App in Flower's simulation engine: ``flwr run`` (through ``python -m
fl_async.app``) and ``run_simulation`` give the same seeded history and write the result files."""

import json
from pathlib import Path

import pytest
import simapps
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fl_async.app import launch, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.app.results import ACCURACY_PLOT, HISTORY, STALENESS_PLOT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NODES = 4
# Server-side keys only: under run_simulation the ClientApps see an empty run config (the
# defaults), and the training settings reach them with every task.
BUDGET = {"max-updates": 8, "eval-every": 4, "local-steps": 2, "clock.sigma": 1.5}


@pytest.fixture(autouse=True)
def _stop_ray():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def comparable(history):
    """What a seeded run fixes: everything but wall times, random node ids and the paths."""
    drop = {"wall-time", "node-id"}
    return {
        "evaluations": [
            {k: v for k, v in e.items() if k not in drop} for e in history["evaluations"]
        ],
        "updates": [{k: v for k, v in u.items() if k not in drop} for u in history["updates"]],
        "partitions": history["partitions"],
        "strategy": history["strategy"],
        "config": {k: v for k, v in history["config"].items() if k != "output-dir"},
    }


def run_in_process(output: Path) -> dict:
    from flwr.simulation import run_simulation

    overrides = {**BUDGET, "num-nodes": NODES, "output-dir": str(output)}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        server_run.run(grid, parse_run_config(overrides))

    run_simulation(
        server,
        client_app,
        num_supernodes=NODES,
        # One actor, as in the launched run: the virtual clock orders the replies either way.
        backend_config=simapps.backend_config(actors=1),
    )
    return json.loads((output / HISTORY).read_text())


def test_flwr_run_writes_results_and_run_simulation_repeats_them(tmp_path):
    output = tmp_path / "flwr-run"
    budget = " ".join(f"{k}={v}" for k, v in BUDGET.items())
    code = launch.main(
        [
            "--app",
            str(ROOT),
            "--nodes",
            str(NODES),
            "--actors",
            "1",
            "--run-config",
            f"{budget} output-dir='{output}'",
        ]
    )
    assert code == 0
    assert {p.name for p in output.iterdir()} >= {HISTORY, ACCURACY_PLOT, STALENESS_PLOT}
    history = json.loads((output / HISTORY).read_text())
    assert history["num-updates"] == 8 and history["faults"] == {}
    assert history["final-accuracy"] is not None
    assert {u["stable-id"] for u in history["updates"]} == set(range(NODES))

    again = run_in_process(tmp_path / "run-simulation")
    assert comparable(again) == comparable(history)
