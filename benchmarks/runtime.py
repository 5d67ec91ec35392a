"""Overhead of fl_async's asynchronous runtime in Flower's simulation engine.

Run by hand (not a test): ``python benchmarks/runtime.py`` (about 9 minutes on 2 cores) or
``python benchmarks/runtime.py --quick`` (a smoke run, about 2.5 minutes). Writes
``benchmarks/results/runtime.json`` (and one log per simulation in ``runtime_logs/``) and
prints a table. Targets (the issue): runtime overhead <= 10% of client compute with 8
concurrent actors; 1,000 virtual nodes in <= 4 GiB.

Every simulation runs in its own child process (a fresh interpreter and Ray, shut down at its
end; the next starts once Ray's processes are gone), with ``runtime_apps``' ClientApp and
ServerApp. Rates are taken after the first cycle of replies (FedAvg: after round 1), which
holds the Ray actors' cold start.

1. Server-side time per update (1M float32 parameters, ASGD and GSGM): the wall time of the
   ServerApp's ``start()`` after start-up (waiting for and identifying nodes), minus the time
   inside ``grid.pull_messages`` and in the loop's ``time.sleep``, per applied update; split
   into parts by timing the loop's methods and the protocol functions (``runtime_timing.Probe``).
2. Client updates per second with 8 Ray actors of 0.25 CPU on 2 cores, against the same client
   work in a plain Python loop (the ceiling), against ``floor`` (the least an asynchronous
   ServerApp does on Flower: re-send a shared message on each reply, no aggregation) and
   against Flower's FedAvg, all with the same ClientApp, 16 nodes and speeds. Two workloads:
   ``sleep`` (a device's time: 8 tasks really run at once; ceiling = 8 looping threads) and
   ``spin`` (fixed CPU work: 8 actors share 2 cores; ceiling = 2 looping processes).
   Overhead = 1 - rate / ceiling. CPU-bound rates depend on what else the machine runs, so
   ``spin`` also reports the share of the simulation's CPU (all its processes, from /proc) not
   spent on the client work, and every measurement reports the cores other processes used.
   Flower's simulation engine sizes its worker pool ``ThreadPoolExecutor()`` (6 threads on 2
   cores) below 8 actors; the child widens it to the actors unless
   ``--flower-default-workers``.
3. Peak memory with 1,000 virtual nodes (GSGM, 100k parameters): summed PSS (and RSS) of the
   process tree (this process, Ray's GCS, raylet, actors), sampled every 0.25 s, with what the
   strategy held (tasks in flight, stashed replies, stored bases, cached gradients).

This script plans the phases and writes the report; ``runtime_simulation`` runs one simulation,
``runtime_ceilings`` the plain loops, ``runtime_analysis`` turns a run's measurements into rates
and times, and ``runtime_report`` gives the figures, the targets and the printed report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

for _key, _value in {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "RAY_DEDUP_LOGS": "0",
}.items():
    os.environ.setdefault(_key, _value)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # runtime_*, for this process and (via sys.path) Ray's workers

import numpy as np  # noqa: E402
from runtime_analysis import analyse  # noqa: E402
from runtime_ceilings import calibrate_spin, ceiling  # noqa: E402
from runtime_report import figures_and_targets, print_report  # noqa: E402
from runtime_simulation import run_child, simulate  # noqa: E402


# ---------------------------------------------------------------------------------- main
def plan(args: argparse.Namespace, spin_units: int) -> dict[str, list[dict[str, Any]]]:
    """The simulations per phase: workload x strategy at ``args.nodes``; the memory run."""
    base = {
        "nodes": args.nodes,
        "actors": args.actors,
        "cpus_per_actor": args.ray_cpus / args.actors,
        "ray_cpus": args.ray_cpus,
        "params": args.params,
        "flower_workers": None if args.flower_default_workers else args.actors,
        "memory_interval": None,
        "max_in_flight": None,
    }
    workloads = {
        "sleep": {"work": "sleep", "work_seconds": args.task_seconds, "spin_units": 0},
        "spin": {"work": "spin", "work_seconds": 0.0, "spin_units": spin_units},
    }
    if args.quick:
        chosen = {"sleep": ("ASGD", "FedAvg", "floor"), "spin": ("GSGM",)}
        cycles = {"sleep": 3, "spin": 2}
    else:
        chosen = {w: args.strategies for w in workloads}
        cycles = {"sleep": 15, "spin": 4}
    phases: dict[str, list[dict[str, Any]]] = {}
    for work, strategies in chosen.items():
        if work not in args.phases:
            continue
        phases[work] = [
            {
                **base,
                **workloads[work],
                "strategy": name,
                "name": f"{work}-{name}",
                "updates": cycles[work] * args.nodes,
            }
            for name in strategies
        ]
    if "memory" in args.phases:
        phases["memory"] = [_memory_run(args, {**base, **workloads["sleep"]})]
    return phases


def _memory_run(args: argparse.Namespace, sleep: dict[str, Any]) -> dict[str, Any]:
    """The memory phase's one simulation: many sleeping nodes, memory sampled."""
    nodes = 100 if args.quick else args.mem_nodes
    return {
        **sleep,
        "work_seconds": args.mem_task_seconds,
        "name": f"memory-{args.mem_strategy}-{nodes}-nodes",
        "strategy": args.mem_strategy,
        "nodes": nodes,
        "params": 10_000 if args.quick else args.mem_params,
        "updates": int(args.mem_cycles * nodes),
        "memory_interval": 0.25,
        "max_in_flight": args.mem_max_in_flight,
    }


def _parser() -> argparse.ArgumentParser:
    """The command line; ``--child SPEC OUT`` (hidden) is how ``simulate`` starts a child."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (~2.5 min)")
    parser.add_argument("--params", type=int, default=1_000_000, help="model size (float32)")
    parser.add_argument("--nodes", type=int, default=16, help="virtual nodes, phases 1-2")
    parser.add_argument("--actors", type=int, default=8, help="concurrent Ray actors")
    parser.add_argument("--ray-cpus", type=int, default=2, help="Ray's num_cpus (init_args)")
    parser.add_argument("--task-seconds", type=float, default=0.5, help="client work per task")
    parser.add_argument(
        "--flower-default-workers",
        action="store_true",
        help="keep Flower's ThreadPoolExecutor() size, min(32, cores + 4)",
    )
    parser.add_argument("--mem-nodes", type=int, default=1000)
    parser.add_argument("--mem-params", type=int, default=100_000)
    parser.add_argument("--mem-strategy", default="GSGM", choices=("ASGD", "GSGM", "FedAvg"))
    parser.add_argument("--mem-task-seconds", type=float, default=0.0)
    parser.add_argument("--mem-cycles", type=float, default=1.2, help="updates per node")
    parser.add_argument(
        "--mem-max-in-flight",
        type=int,
        default=None,
        help="the memory run's max_in_flight (default: the strategy's)",
    )
    parser.add_argument(
        "--phases",
        type=lambda v: v.split(","),
        default=["sleep", "spin", "memory"],
        help="comma-separated subset of sleep,spin,memory",
    )
    parser.add_argument(
        "--strategies",
        type=lambda v: tuple(v.split(",")),
        default=("floor", "ASGD", "GSGM", "FedAvg"),
        help="comma-separated subset of floor,ASGD,GSGM,FedAvg (phases 1-2)",
    )
    parser.add_argument("--out", default=str(HERE / "results" / "runtime.json"))
    parser.add_argument("--child", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    return parser


def run_phases(
    args: argparse.Namespace, spin_units: int, log_dir: Path, started: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run each phase's simulations, a workload's between two measurements of its ceiling;
    the ceilings by workload and the analysed runs by name. Prints progress, timed from
    ``started``."""
    duration = 2.0 if args.quick else 4.0
    ceilings: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for phase, specs in plan(args, spin_units).items():
        before = ceiling(args, phase, spin_units, duration) if phase != "memory" else None
        results = []
        for spec in specs:
            print(
                f"[{time.time() - started:4.0f} s] {spec['name']}: {spec['nodes']} nodes, "
                f"{spec['updates']} updates",
                flush=True,
            )
            results.append(simulate(spec, log_dir))
            if results[-1]["ray_processes_left"]:
                print(f"  Ray processes left: {results[-1]['ray_processes_left']}", flush=True)
        used = None
        if before is not None:
            after = ceiling(args, phase, spin_units, duration)
            used = max(before["rate"], after["rate"])  # the faster: overheads are not flattered
            ceilings[phase] = {
                "before": before,
                "after": after,
                "used": used,
                "loops": before["loops"],
                "external_cores_used": max(
                    before["external_cores_used"], after["external_cores_used"]
                ),
            }
        for result in results:
            runs[result["spec"]["name"]] = run = analyse(result, ceilings.get(phase))
            print(
                f"  {result['spec']['name']}: "
                f"{run['throughput']['steady_updates_per_s']:.2f} updates/s"
                + (f" (ceiling {used:.2f})" if used else ""),
                flush=True,
            )
    return ceilings, runs


def main() -> None:
    """Measure every phase, write the report (JSON) and print it; with ``--child``, run one
    simulation instead."""
    args = _parser().parse_args()
    if args.child:
        run_child(json.loads(args.child[0]), Path(args.child[1]))
        return

    started = time.time()
    out = Path(args.out)
    log_dir = out.parent / "runtime_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    spin_units = calibrate_spin(args.task_seconds)
    ceilings, runs = run_phases(args, spin_units, log_dir, started)
    report = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "params": args.params,
        "nodes": args.nodes,
        "actors": args.actors,
        "cpus_per_actor": args.ray_cpus / args.actors,
        "task_seconds": args.task_seconds,
        "spin_units": spin_units,
        "flower_workers": "Flower's default" if args.flower_default_workers else args.actors,
        "ceilings": ceilings,
        "runs": runs,
        **figures_and_targets(runs, args.task_seconds),
        "total_wall_s": time.time() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print_report(report)
    print(f"\nwritten to {out} in {report['total_wall_s']:.0f} s")


if __name__ == "__main__":
    main()
