"""The whole Flower App in Flower's simulation engine: ``flwr run`` (through ``python -m
fl_async.app --ray-address HOST:PORT``) on a two-node Ray cluster trains on both nodes and writes
the result files, and ``run_simulation`` gives the same seeded history.

One test and two simulations: the cluster's run is the reference of the comparison (a launch
costs about 20 CPU-seconds of start-up on two cores). A launch with a Ray of its own on one
machine, ``python -m fl_async.app``'s default, is made and compared with a study's run in
``test_bench_slow.py`` (``--engine separate``); the checks of ``--ray-address`` that need no
cluster are in ``test_ray_cluster.py``."""

import json
import os
from pathlib import Path

import pytest
import simapps
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from ray_cluster import TwoNodeRay

from fl_async.app import cluster, launch, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.app.results import ACCURACY_PLOT, HISTORY, STALENESS_PLOT

pytestmark = pytest.mark.slow(seconds=90)

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
        # One actor, where the cluster's run had one per node (two): the virtual clock orders
        # the replies either way.
        backend_config=simapps.backend_config(),
    )
    return json.loads((output / HISTORY).read_text())


def launched(output: Path, *options: str) -> dict:
    """The App run through ``python -m fl_async.app`` with ``options``: its history."""
    budget = " ".join(f"{k}={v}" for k, v in BUDGET.items())
    argv = ["--app", str(ROOT), "--nodes", str(NODES), *options]
    assert launch.main([*argv, "--run-config", f"{budget} output-dir='{output}'"]) == 0
    return json.loads((output / HISTORY).read_text())


def test_flwr_run_on_a_ray_cluster_writes_results_and_run_simulation_repeats_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv(cluster.RAY_ADDRESS, raising=False)
    output = tmp_path / "cluster"
    history = _a_two_node_ray_cluster_trains_on_both_nodes(tmp_path, output)
    # the ServerApp, three processes below, knows its launcher (launcher_watch)
    assert f"stops if its launcher (process {os.getpid()}) ends first" in capsys.readouterr().out
    assert {p.name for p in output.iterdir()} >= {HISTORY, ACCURACY_PLOT, STALENESS_PLOT}
    assert history["num-updates"] == 8 and history["faults"] == {}
    assert history["final-accuracy"] is not None
    assert {u["stable-id"] for u in history["updates"]} == set(range(NODES))

    again = run_in_process(tmp_path / "run-simulation")
    assert comparable(again) == comparable(history)


def _a_two_node_ray_cluster_trains_on_both_nodes(tmp_path: Path, output: Path) -> dict:
    """The seeded run on a two-node Ray cluster (``--ray-address``): it trains on both nodes,
    and leaves the cluster running with every CPU free again; its history."""
    with TwoNodeRay(tmp_path / "ray") as ray:
        head, worker = sorted(ray.nodes, key=lambda node: ray.nodes[node] != "head")
        history = launched(output, "--ray-address", ray.address)
        # Each node's worker logs hold the ClientApp's line with that node's id: both trained,
        # with one torch thread as on one machine.
        assert ray.clientapp_nodes() == {"head": {(head, 1)}, "worker": {(worker, 1)}}
        # The cluster still runs, and the run's actors are gone: every CPU is free again.
        after = ray.state(want=2)
        assert set(after["nodes"]) == {head, worker}
        assert after["free-cpus"] == after["cpus"] == 2
    assert ray.leftovers() == []
    return history
