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
- CPU seconds per process group, over the whole command and within the run (from the step-0
  evaluation to the end), and the cores the whole command kept busy; the floor's own CPU
  seconds per process.

``--baseline CHECKOUT`` runs each workload again from another checkout (a ``git worktree`` at
an older commit) after each repeat, so start-up times come in pairs measured minutes apart.

One compact JSON result (``benchmark: floor``) goes to ``--out`` (default
``benchmarks/results/measured/floor-<date>-<commit>.json``); ``blocks.py`` renders it
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
from process_usage import process_tree
from scale import git_commit, provenance

HERE = Path(__file__).resolve().parent
WORKLOADS = {
    "main": ["--run-config", "num-rounds=10 seed=5"],
    "asgd": [
        "--nodes",
        "10",
        "--run-config",
        "strategy='asgd' partition.alpha=0.1 num-rounds=20 seed=5",
    ],
    "synthetic-steps1": [
        "--nodes",
        "20",
        "--run-config",
        "dataset='synthetic' local-steps=1 num-rounds=50 seed=5",
    ],
    "main-send-ahead": ["--run-config", "num-rounds=10 seed=5 send-ahead=5"],
    "asgd-send-ahead": [
        "--nodes",
        "10",
        "--run-config",
        "strategy='asgd' partition.alpha=0.1 num-rounds=20 seed=5 send-ahead=5",
    ],
    "main-gpu4": ["--gpus-per-actor", "0.25", "--run-config", "num-rounds=10 seed=5"],
    "main-gpu16": ["--gpus-per-actor", "0.0625", "--run-config", "num-rounds=10 seed=5"],
}
"""The issue's two workloads, the fixed cost per update (one local step, a linear model), the
two workloads with tasks sent ahead in virtual-finish order (``send-ahead``), and the main
workload with its actors training on one GPU, 4 or 16 of them sharing it (``main-gpu4``,
``main-gpu16``; their floor is still plain processes on the CPU cores)."""
MILESTONES = {
    "simulation-started": r"Starting Flower Simulation",
    "serverapp-started": r"fl-async: \w[\w-]* on ",
    "nodes-identified": r"Starting \w+ \(asynchronous\)",
    "step-0-evaluated": r"step 0 \|",
    "finished": r"Finished \(",
    "command-done": r"^fl-async: (done|failed|stopped)",
}
ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
}


def group_of(pid: int) -> str:
    """Which part of a run a process is, from its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    line = " ".join(words)
    for needle, group in (
        ("ClientAppActor", "Ray actor"),
        ("flwr-simulation", "simulation"),
        ("flower-superlink", "SuperLink"),
        ("flower-superexec", "SuperExec"),
        ("fl_async.app", "launcher"),
        ("flwr run", "flwr run"),
    ):
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
        self._lock = threading.Lock()
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
                with self._lock:
                    self.seen[pid] = (group, cpu)
            self._halt.wait(self.interval)

    def snapshot(self) -> dict[str, float]:
        """CPU seconds so far per group, the Ray actors together (``Ray actors``)."""
        totals: dict[str, float] = {}
        with self._lock:
            for group, cpu in self.seen.values():
                name = "Ray actors" if group == "Ray actor" else group
                totals[name] = totals.get(name, 0.0) + cpu
        return totals

    def stop(self) -> dict[str, Any]:
        """CPU seconds per group (each Ray actor on its own) and in all."""
        self._halt.set()
        self.join()
        groups: dict[str, float] = {}
        actors = sorted(
            (cpu for group, cpu in self.seen.values() if group == "Ray actor"), reverse=True
        )
        for group, cpu in self.seen.values():
            if group != "Ray actor":
                groups[group] = round(groups.get(group, 0.0) + cpu, 2)
        for i, cpu in enumerate(actors):
            groups[f"Ray actor {i + 1}"] = round(cpu, 2)
        groups["total"] = round(sum(cpu for _, cpu in self.seen.values()), 2)
        return groups


def run_command(workload: str, output: Path, app: Path = HERE.parent) -> dict[str, Any]:
    """Run the main command of ``workload`` from the checkout ``app`` into ``output``; wall
    time, milestones, CPU."""
    args = list(WORKLOADS[workload])
    where = f"output-dir='{output}'"
    i = args.index("--run-config") + 1
    args[i] = f"{args[i]} {where}"
    # Run from ``app``: ``python -m`` imports that checkout's fl_async (a baseline worktree).
    command = [sys.executable, "-m", "fl_async.app", "--app", str(app), *args]
    milestones: dict[str, float] = {}
    snapshots: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **ENV},
        cwd=app,
    ) as process:
        sampler = CpuSampler(process.pid)
        sampler.start()
        tail: list[str] = []
        for line in process.stdout:
            now = time.perf_counter() - started
            tail = (tail + [line.rstrip()])[-20:]
            for name, pattern in MILESTONES.items():
                if name not in milestones and re.search(pattern, line):
                    milestones[name] = round(now, 2)
                    snapshots[name] = sampler.snapshot()
        code = process.wait()
    wall = time.perf_counter() - started
    cpu = sampler.stop()
    if code != 0:
        raise RuntimeError(f"{workload}: exit {code}:\n" + "\n".join(tail))
    return {
        "command-wall": round(wall, 2),
        "milestones": milestones,
        "cpu": cpu,
        "cpu-in-run": _between(snapshots, "step-0-evaluated", "finished"),
        "cores-busy": round(cpu["total"] / wall, 2),
    }


def _between(snapshots: dict[str, dict[str, float]], first: str, last: str) -> dict[str, float]:
    """CPU seconds per group from milestone ``first`` to ``last`` (the run's own part of the
    command, without the start-up), and in all."""
    if first not in snapshots or last not in snapshots:
        return {}
    start, end = snapshots[first], snapshots[last]
    spent = {g: round(end[g] - start.get(g, 0.0), 2) for g in sorted(end)}
    return {**spent, "total": round(sum(spent.values()), 2)}


def run_once(workload: str, app: Path = HERE.parent) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run of ``workload`` from ``app``: its figures (start-up included) and history."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp, "run")
        measured = run_command(workload, output, app)
        history = json.loads((output / "history.json").read_text(encoding="utf-8"))
    run = history["wall-time"]
    return {
        **measured,
        "load-before": round(load, 2),
        "run-wall": round(run, 2),
        "startup": round(measured["command-wall"] - run, 2),
        "first-update-wall": round(min(u["wall-time"] for u in history["updates"]), 2),
        "updates": history["num-updates"],
        "final-accuracy": history["final-accuracy"],
    }, history


def measure(workload: str, processes: int) -> dict[str, Any]:
    """One run of ``workload`` and its floor."""
    measured, history = run_once(workload)
    floor = replay(history, processes)
    run = history["wall-time"]
    updates = history["num-updates"]
    return {
        **measured,
        "floor": round(floor["floor-seconds"], 2),
        "floor-busy": [round(b, 2) for b in floor["busy-seconds"]],
        "floor-cpu": [round(c, 2) for c in floor["cpu-seconds"]],
        "evaluations": floor["evaluations"],
        "efficiency": round(floor["floor-seconds"] / run, 3),
        "run-ms-per-update": round(1e3 * run / updates, 2),
        "floor-ms-per-update": round(1e3 * floor["floor-seconds"] / updates, 2),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure over the repeats."""
    keys = (
        "efficiency",
        "run-wall",
        "floor",
        "startup",
        "command-wall",
        "first-update-wall",
        "run-ms-per-update",
        "floor-ms-per-update",
        "cores-busy",
    )
    return {k: _spread([r[k] for r in runs]) for k in keys}


def _workload(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """``args.repeats`` measurements of ``workload``, each followed by the baseline's run."""
    runs, baseline = [], []
    for k in range(args.repeats):
        runs.append(measure(workload, args.processes))
        shown = {key: runs[-1][key] for key in ("efficiency", "run-wall", "floor", "startup")}
        if args.baseline is not None:
            baseline.append(run_once(workload, args.baseline)[0])
            shown["baseline-startup"] = baseline[-1]["startup"]
        print(f"{workload} {k + 1}/{args.repeats}: {json.dumps(shown)}", flush=True)
    out = {"command": WORKLOADS[workload], "summary": summarise(runs), "runs": runs}
    if baseline:
        out["baseline"] = {
            "runs": baseline,
            "startup": _spread([r["startup"] for r in baseline]),
            "run-wall": _spread([r["run-wall"] for r in baseline]),
        }
    return out


def _spread(values: list[float]) -> list[float]:
    """Median, min and max of ``values``."""
    return [statistics.median(values), min(values), max(values)]


def _gpu() -> str:
    """The GPU the actors could use (``"none"`` without CUDA)."""
    import torch  # the replay imports it anyway; the command-line help does not need it

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--label", default="", help="what this result measures (free text)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="CHECKOUT",
        help="also run each workload from this checkout (e.g. a git worktree at an older "
        "commit) right after each repeat, for paired start-up times",
    )
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "floor",
        **provenance(),
        "label": args.label,
        "cores": os.cpu_count(),
        "gpu": _gpu(),
        "workloads": {},
    }
    if args.baseline is not None:
        result["baseline-commit"] = git_commit(args.baseline)
    for workload in args.workload or ["main", "asgd"]:
        result["workloads"][workload] = _workload(workload, args)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or HERE / "results" / "measured" / f"floor-{stamp}-{result['commit']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
