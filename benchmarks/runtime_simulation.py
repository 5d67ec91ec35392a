"""One simulation of ``runtime.py``: ``simulate`` runs it in a child process (``runtime.py
--child``: a fresh interpreter and Ray), where ``run_child`` sets up ``runtime_apps``' ClientApp
and ServerApp and, for the memory run, a ``MemorySampler`` of the process tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import runtime_apps as apps
from process_usage import tree_memory

RUNTIME = Path(__file__).resolve().parent / "runtime.py"
"""The script a child runs (``--child``): it sets Flower's and Ray's environment first."""


def _strategy_factory(name: str, nodes: int, max_in_flight: int | None):
    from flwr.serverapp.strategy import FedAvg

    from fl_async.strategies import ASGD, GSGM

    if name == "FedAvg":
        return lambda: FedAvg(
            fraction_evaluate=0.0, min_available_nodes=nodes, min_train_nodes=nodes
        )
    if name == "floor":
        return lambda: apps.PlainAsync(min_nodes=nodes)
    preset = {"ASGD": ASGD, "GSGM": GSGM}[name]
    return lambda: preset(min_nodes=nodes, max_in_flight=max_in_flight)


class MemorySampler(threading.Thread):
    """Peak summed PSS/RSS of this process tree, sampled every ``interval`` seconds.

    One sample costs ~30-50 ms of CPU here (smaps_rollup walks every mapping), so only the
    memory run samples; the others read the tree once, at the end of the ServerApp.
    """

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak: dict[str, Any] = {"rss": 0.0, "pss": 0.0, "processes": 0, "groups": {}}
        self.most: dict[str, int] = {}  # the largest counts of the strategy's holdings
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            now = tree_memory()
            state = apps.strategy_state()
            if now["pss"] > self.peak["pss"]:
                self.peak["pss"], self.peak["groups"] = now["pss"], now["groups"]
                self.peak["strategy_state"] = state
            for key, value in state.items():
                self.most[key] = max(self.most.get(key, 0), value)
            self.peak["rss"] = max(self.peak["rss"], now["rss"])
            self.peak["processes"] = max(self.peak["processes"], now["processes"])
            self.samples += 1
            self._halt.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self.join()
        return {**self.peak, "strategy_state_max": self.most, "samples": self.samples}


def run_child(spec: dict[str, Any], out: Path) -> None:
    """One simulation described by ``spec``; its raw measurements as JSON in ``out``."""
    from flwr.simulation import run_simulation

    apps.SETUP.clear()
    apps.SETUP.update(
        strategy=_strategy_factory(spec["strategy"], spec["nodes"], spec["max_in_flight"]),
        params=spec["params"],
        nodes=spec["nodes"],
        updates=spec["updates"],
        rounds=max(1, spec["updates"] // spec["nodes"]),
        timeout=600.0,
        train_config={
            "work": spec["work"],
            "work-seconds": float(spec["work_seconds"]),
            "spin-units": int(spec["spin_units"]),
        },
    )
    apps.RESULTS.clear()
    if spec["flower_workers"]:
        # Flower's simulation engine runs one worker thread per actor in a ThreadPoolExecutor()
        # of default size min(32, cores + 4): 6 threads on 2 cores, so only 6 of 8 actors
        # ever work. Size the pool to the actors (Flower's code is otherwise unchanged).
        import functools

        from flwr.server.superlink.fleet.vce import vce_api

        vce_api.ThreadPoolExecutor = functools.partial(
            ThreadPoolExecutor, max_workers=spec["flower_workers"]
        )
    sampler = MemorySampler(spec["memory_interval"]) if spec["memory_interval"] else None
    if sampler is not None:
        sampler.start()
    start = time.time()
    run_simulation(
        apps.server,
        apps.client,
        num_supernodes=spec["nodes"],
        backend_config={
            "client_resources": {"num_cpus": spec["cpus_per_actor"], "num_gpus": 0.0},
            "init_args": {"num_cpus": spec["ray_cpus"], "num_gpus": 0},
        },
    )
    total = time.time() - start
    if not apps.RESULTS:
        raise RuntimeError("the ServerApp did not finish: see the log above")
    result = {**apps.RESULTS[0], "spec": spec, "simulation_wall": total}
    result["peak_memory"] = sampler.stop() if sampler is not None else None
    out.write_text(json.dumps(result))


def simulate(spec: dict[str, Any], log_dir: Path) -> dict[str, Any]:
    """Run ``spec`` in a child process (a fresh interpreter and Ray); its measurements.

    Ray is shut down at the end of ``run_simulation``; the child then waits (up to 30 s) for
    its Ray processes to exit, so that one phase does not load the next.
    """
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    log = log_dir / f"{spec['name']}.log"
    cmd = [sys.executable, str(RUNTIME), "--child", json.dumps(spec), str(out)]
    load_before = os.getloadavg()[0]
    start = time.time()
    with log.open("w") as stream:
        done = subprocess.run(cmd, stdout=stream, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or out.stat().st_size == 0:
        raise RuntimeError(f"simulation {spec['name']} failed ({done.returncode}): see {log}")
    result = json.loads(out.read_text())
    out.unlink()
    result["process_wall"] = time.time() - start
    result["load_average"] = [load_before, os.getloadavg()[0]]
    alive = _ray_leftovers(result)
    deadline = time.time() + 30
    while alive and time.time() < deadline:
        time.sleep(0.5)
        alive = _ray_leftovers(result)
    result["ray_processes_left"] = alive
    return result


def _ray_leftovers(result: dict[str, Any]) -> list[int]:
    """The finished child's Ray processes that are still alive (by pid and start group)."""
    return [
        int(pid)
        for pid, (group, _) in result["cpu_at_end"].items()
        if group != "server process" and Path(f"/proc/{pid}").exists()
    ]
