"""Efficiency of a simulation: its floor (the same client work in plain processes) over its run.

Run by hand (not a test)::

    python benchmarks/floor.py --workload main --workload asgd --repeats 3

For each workload and repeat it runs the main command (``python -m fl_async.app``) while it
samples, every 0.25 s, the CPU time of every process under it, grouped (the launcher, ``flwr
run``, the SuperLink, the simulation process that runs the ServerApp, each Ray actor, Ray's
services), and stamps each line the command prints; then it replays the run's train tasks and
central evaluations in plain processes, one per core (``floor_replay``). It reports:

- efficiency = floor / run, the run being the history's ``wall-time`` (``start()`` to its end);
- start-up = the command's wall time minus the run's, and the milestones of the start-up;
- CPU seconds per process group, and the cores the whole command kept busy.

One compact JSON result (``benchmark: floor``) goes to ``--out`` (default
``benchmarks/results/measured/floor-<date>-<commit>.json``); ``measured_tables.py`` renders it
in PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from floor_replay import replay
from runtime_apps import process_tree
from scale import provenance

HERE = Path(__file__).resolve().parent
WORKLOADS = {
    "main": ["--run-config", "num-rounds=10 seed=5"],
    "asgd": ["--nodes", "10", "--run-config",
             "strategy='asgd' partition.alpha=0.1 num-rounds=20 seed=5"],
    "synthetic-steps1": ["--nodes", "20", "--run-config",
                         "dataset='synthetic' local-steps=1 num-rounds=50 seed=5"],
}  # fmt: skip
"""The issue's two workloads, and the fixed cost per update (one local step, a linear model)."""
MILESTONES = {
    "simulation-started": r"Starting Flower Simulation",
    "serverapp-started": r"fl-async: \w[\w-]* on ",
    "nodes-identified": r"Starting \w+ \(asynchronous\)",
    "step-0-evaluated": r"step 0 \|",
    "finished": r"Finished \(",
    "command-done": r"^fl-async: (done|failed|stopped)",
}
ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
       "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}  # fmt: skip


def group_of(pid: int) -> str:
    """Which part of a run a process is, from its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    line = " ".join(words)
    for needle, group in (("ClientAppActor", "Ray actor"), ("flwr-simulation", "simulation"),
                          ("flower-superlink", "SuperLink"), ("flower-superexec", "SuperExec"),
                          ("fl_async.app", "launcher"), ("flwr run", "flwr run")):  # fmt: skip
        if needle in line:
            return group
    return "Ray services" if "ray" in line else "other"


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler(threading.Thread):
    """The last CPU time seen of every process under ``root``, with its group."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.seen: dict[int, tuple[str, float]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for pid in process_tree(self.root):
                cpu = _cpu_seconds(pid)
                if cpu is None:
                    continue
                known = self.seen.get(pid)
                # A process's command line changes when it execs (a fork of the SuperExec
                # becomes the simulation) and a Ray worker renames itself (ray::IDLE, then
                # ray::ClientAppActor...): look again at every sample, keeping "Ray actor" and
                # any group found over "other" once seen.
                group = group_of(pid)
                if known and (known[0] == "Ray actor" or group in ("other", "gone")):
                    group = known[0]
                self.seen[pid] = (group, cpu)
            self._halt.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        """CPU seconds per group (each Ray actor on its own) and in all."""
        self._halt.set()
        self.join()
        groups: dict[str, float] = {}
        actors = sorted((cpu for group, cpu in self.seen.values() if group == "Ray actor"),
                        reverse=True)  # fmt: skip
        for group, cpu in self.seen.values():
            if group != "Ray actor":
                groups[group] = round(groups.get(group, 0.0) + cpu, 2)
        for i, cpu in enumerate(actors):
            groups[f"Ray actor {i + 1}"] = round(cpu, 2)
        groups["total"] = round(sum(cpu for _, cpu in self.seen.values()), 2)
        return groups


def run_command(workload: str, output: Path) -> dict[str, Any]:
    """Run the main command of ``workload`` into ``output``; wall time, milestones, CPU."""
    args = list(WORKLOADS[workload])
    where = f"output-dir='{output}'"
    i = args.index("--run-config") + 1
    args[i] = f"{args[i]} {where}"
    command = [sys.executable, "-m", "fl_async.app", "--app", str(HERE.parent), *args]
    milestones: dict[str, float] = {}
    started = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, **ENV}, cwd=HERE.parent) as process:  # fmt: skip
        sampler = CpuSampler(process.pid)
        sampler.start()
        tail: list[str] = []
        for line in process.stdout:
            now = time.perf_counter() - started
            tail = (tail + [line.rstrip()])[-20:]
            for name, pattern in MILESTONES.items():
                if name not in milestones and re.search(pattern, line):
                    milestones[name] = round(now, 2)
        code = process.wait()
    wall = time.perf_counter() - started
    cpu = sampler.stop()
    if code != 0:
        raise RuntimeError(f"{workload}: exit {code}:\n" + "\n".join(tail))
    return {"command-wall": round(wall, 2), "milestones": milestones, "cpu": cpu,
            "cores-busy": round(cpu["total"] / wall, 2)}  # fmt: skip


def measure(workload: str, processes: int) -> dict[str, Any]:
    """One run of ``workload`` and its floor."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp, "run")
        measured = run_command(workload, output)
        history = json.loads((output / "history.json").read_text(encoding="utf-8"))
    floor = replay(history, processes)
    run = history["wall-time"]
    updates = history["num-updates"]
    return {
        **measured,
        "load-before": round(load, 2),
        "run-wall": round(run, 2),
        "startup": round(measured["command-wall"] - run, 2),
        "first-update-wall": round(min(u["wall-time"] for u in history["updates"]), 2),
        "updates": updates,
        "final-accuracy": history["final-accuracy"],
        "floor": round(floor["floor-seconds"], 2),
        "floor-busy": [round(b, 2) for b in floor["busy-seconds"]],
        "evaluations": floor["evaluations"],
        "efficiency": round(floor["floor-seconds"] / run, 3),
        "run-ms-per-update": round(1e3 * run / updates, 2),
        "floor-ms-per-update": round(1e3 * floor["floor-seconds"] / updates, 2),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure over the repeats."""
    keys = ("efficiency", "run-wall", "floor", "startup", "command-wall", "first-update-wall",
            "run-ms-per-update", "floor-ms-per-update", "cores-busy")  # fmt: skip
    return {k: [statistics.median(r[k] for r in runs), min(r[k] for r in runs),
                max(r[k] for r in runs)] for k in keys}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--label", default="", help="what this result measures (free text)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "floor", **provenance(), "label": args.label,
                              "cores": os.cpu_count(), "workloads": {}}  # fmt: skip
    for workload in args.workload or ["main", "asgd"]:
        runs = []
        for k in range(args.repeats):
            runs.append(measure(workload, args.processes))
            print(
                f"{workload} {k + 1}/{args.repeats}: "
                + json.dumps(
                    {key: runs[-1][key] for key in ("efficiency", "run-wall", "floor", "startup")}
                )
            )
        result["workloads"][workload] = {"command": WORKLOADS[workload],
                                         "summary": summarise(runs), "runs": runs}  # fmt: skip
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or HERE / "results" / "measured" / f"floor-{stamp}-{result['commit']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
