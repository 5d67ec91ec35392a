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
   into parts by timing the loop's methods and the protocol functions (``runtime_apps.Probe``).
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
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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
sys.path.insert(0, str(HERE))  # runtime_apps, for this process and (via sys.path) Ray's workers

import numpy as np  # noqa: E402
import runtime_apps as apps  # noqa: E402

GIB = 1024**3
QUIET = 0.2
"""Cores other processes may use during a CPU-bound measurement for its wall clock to count."""


# ------------------------------------------------------------------------- one simulation
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
            now = apps.tree_memory()
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
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec), str(out)]
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


# ----------------------------------------------------------------------------- analysis
def throughput(result: dict[str, Any], skip: int) -> dict[str, Any]:
    """Rates and per-update costs after the first ``skip`` replies (the first cycle of
    nodes, or FedAvg's first round: both include the Ray actors' cold start)."""
    replies = sorted(result["replies"], key=lambda r: r["arrival"])
    n = len(replies)
    if n <= skip:
        raise RuntimeError(f"{result['spec']['name']}: {n} replies, need more than {skip}")
    window = replies[-1]["arrival"] - replies[skip - 1]["arrival"]
    steady = replies[skip:]
    latencies = [r["pickup_latency"] for r in steady]
    groups = cpu_by_group(result)
    cpu = {k: v / (n - skip) for k, v in groups.items()}
    cores = os.cpu_count() or 1
    measured = result["end"] - result["mark_time"]
    external = (result["busy_at_end"] - result["busy_at_mark"] - groups["total"]) / measured
    work_cpu = statistics.fmean(r["work_cpu"] for r in steady)
    by_actor: dict[int, list[dict[str, float]]] = {}
    for r in sorted(steady, key=lambda r: r["received"]):
        by_actor.setdefault(r["pid"], []).append(r)
    gaps = [
        b["received"] - a["replied"]
        for rs in by_actor.values()
        for a, b in zip(rs, rs[1:], strict=False)
    ]
    return {
        "replies": n,
        "applied_updates": result["updates"],
        "steady_updates_per_s": (n - skip) / window,
        "overall_updates_per_s": n / (replies[-1]["arrival"] - result["first_train_push"]),
        "actor_utilisation": sum(r["work"] for r in steady) / (result["spec"]["actors"] * window),
        "pickup_latency_ms_median": 1e3 * statistics.median(latencies),
        "pickup_latency_ms_p90": 1e3 * float(np.percentile(latencies, 90)),
        "actor_gap_ms_median": 1e3 * statistics.median(gaps) if gaps else float("nan"),
        "actor_gap_ms_mean": 1e3 * statistics.fmean(gaps) if gaps else float("nan"),
        "client_deserialise_ms_mean": 1e3
        * statistics.fmean(r["work_start"] - r["received"] for r in steady),
        "client_serialise_ms_mean": 1e3
        * statistics.fmean(r["replied"] - r["work_start"] - r["work"] for r in steady),
        "cpu_s_per_update": cpu,
        "work_cpu_s_per_update": work_cpu,
        "clientapp_cpu_s_per_update": statistics.fmean(r["client_cpu"] for r in steady),
        "cpu_overhead": 1.0 - work_cpu / cpu["total"] if cpu["total"] > 0 else float("nan"),
        "tree_cores_used": groups["total"] / measured,
        "external_cores_used": external,
        "cores": cores,
    }


def cpu_by_group(result: dict[str, Any]) -> dict[str, float]:
    """CPU seconds of the process tree in the steady window (from the reply that ends the
    first cycle to the end of ``start()``), by group."""
    before = result["cpu_at_mark"]
    groups: dict[str, float] = {}
    for pid, (group, cpu) in result["cpu_at_end"].items():
        groups[group] = groups.get(group, 0.0) + cpu - before.get(pid, [group, 0.0])[1]
    groups["total"] = sum(groups.values())
    return groups


BREAKDOWN = (
    ("build task messages (serialise model)", "train_message", ()),
    ("push (Flower in-memory state)", "grid.push_messages", ()),
    ("base copies (_track)", "_track", ()),
    ("dispatch: task bookkeeping", "_make_task", ("train_message",)),
    ("dispatch: choose nodes (_dispatchable)", "_dispatchable", ()),
    ("read reply (deserialise)", "read_train_reply", ()),
    ("pseudo-gradient (base - trained)", "_difference", ()),
    ("aggregator apply", "aggregator.apply", ()),
    ("reply metrics record", "metric_record", ()),
    (
        "handle: rest (release base, policy)",
        "_handle",
        ("read_train_reply", "_difference", "aggregator.apply", "metric_record"),
    ),
    (
        "dispatch: rest",
        "_dispatch",
        ("_make_task", "grid.push_messages", "_track", "_dispatchable"),
    ),
    ("wait loop: stash and lists", "_wait_for", ("grid.pull_messages", "sleep")),
    ("refresh node list", "_refresh_nodes", ()),
    ("after step (eval/checkpoint check)", "_after_step", ()),
)


def server_time(result: dict[str, Any]) -> dict[str, Any]:
    """The ServerApp's own time per applied update, and its parts (ms per update).

    busy = wall time of ``start()`` - start-up (waiting for nodes, identifying them)
    - time inside ``grid.pull_messages`` - time in the loop's ``time.sleep``.
    """
    s = result["seconds"]
    updates = max(1, result["updates"])
    loop = result["start_wall"] - s.get("startup", 0.0)
    busy = loop - s.get("grid.pull_messages", 0.0) - s.get("sleep", 0.0)
    parts = {
        label: 1e3 * (s.get(key, 0.0) - sum(s.get(m, 0.0) for m in minus)) / updates
        for label, key, minus in BREAKDOWN
    }
    parts["other"] = 1e3 * busy / updates - sum(parts.values())
    pulls = max(1, result["calls"].get("grid.pull_messages", 1))
    return {
        "loop_s": loop,
        "startup_s": s.get("startup", 0.0),
        "pull_s": s.get("grid.pull_messages", 0.0),
        "sleep_s": s.get("sleep", 0.0),
        "busy_s": busy,
        "busy_ms_per_update": 1e3 * busy / updates,
        "server_thread_cpu_ms_per_update": 1e3 * result["server_thread_cpu"] / updates,
        "pull_ms_per_call": 1e3 * s.get("grid.pull_messages", 0.0) / pulls,
        "pulls_per_update": result["pulls"] / updates,
        "empty_pull_fraction": result["empty_pulls"] / max(1, result["pulls"]),
        "parts_ms_per_update": parts,
        "calls": result["calls"],
    }


# ------------------------------------------------------------------------------ ceilings
def _loop_worker(args: tuple[int, str, float, int, float]) -> tuple[int, float, float]:
    params, work, seconds, units, duration = args
    _, model = apps.make_model(params)
    done, start, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < duration:
        apps.client_work(model, work, seconds, units)
        done += 1
    return done, time.perf_counter() - start, time.thread_time() - cpu


def plain_loop_rate(
    params: int, work: str, seconds: float, units: int, *, concurrency: int, duration: float
) -> dict[str, float]:
    """Updates/s of ``concurrency`` plain loops calling ``client_work`` on the model, and
    the cores other processes of the machine used meanwhile.

    ``spin`` loops run in processes (one per core they may use), ``sleep`` loops in threads
    (sleep and numpy release the GIL).
    """
    jobs = [(params, work, seconds, units, duration)] * concurrency
    busy, start = apps.machine_busy_seconds(), time.perf_counter()
    if work == "spin":
        with multiprocessing.get_context("fork").Pool(concurrency) as pool:
            parts = pool.map(_loop_worker, jobs)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            parts = list(pool.map(_loop_worker, jobs))
    elapsed = time.perf_counter() - start
    own = sum(cpu for _, _, cpu in parts)
    return {
        "rate": sum(done / spent for done, spent, _ in parts),
        "external_cores_used": (apps.machine_busy_seconds() - busy - own) / elapsed,
    }


def calibrate_spin(seconds: float) -> int:
    """Loop iterations that take ``seconds`` of CPU here (median of 5 timings)."""
    units = 200_000
    times = []
    for _ in range(5):
        start = time.process_time()
        apps.spin(units)
        times.append(time.process_time() - start)
    return int(units * seconds / statistics.median(times))


def ceiling(args: argparse.Namespace, work: str, spin_units: int, duration: float) -> dict:
    """The plain loop's updates/s for ``work``: ``actors`` sleeping threads, or one spinning
    process per core the actors can use (``min(actors, cores)``)."""
    if work == "sleep":
        loop = plain_loop_rate(args.params, "sleep", args.task_seconds, 0,
                               concurrency=args.actors, duration=duration)  # fmt: skip
        return {**loop, "loops": args.actors, "nominal": args.actors / args.task_seconds}
    loops = min(args.actors, os.cpu_count() or 1)
    loop = plain_loop_rate(args.params, "spin", 0.0, spin_units, concurrency=loops,
                           duration=duration)  # fmt: skip
    return {**loop, "loops": loops, "nominal": loops / args.task_seconds}


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
            {**base, **workloads[work], "strategy": name, "name": f"{work}-{name}",
             "updates": cycles[work] * args.nodes}
            for name in strategies
        ]  # fmt: skip
    nodes = 100 if args.quick else args.mem_nodes
    if "memory" not in args.phases:
        return phases
    phases["memory"] = [{
        **base, **workloads["sleep"], "work_seconds": args.mem_task_seconds,
        "name": f"memory-{args.mem_strategy}-{nodes}-nodes", "strategy": args.mem_strategy,
        "nodes": nodes, "params": 10_000 if args.quick else args.mem_params,
        "updates": int(args.mem_cycles * nodes), "memory_interval": 0.25,
        "max_in_flight": args.mem_max_in_flight,
    }]  # fmt: skip
    return phases


def analyse(result: dict[str, Any], ceiling: dict[str, Any] | None) -> dict[str, Any]:
    spec = result["spec"]
    rates = throughput(result, skip=spec["nodes"])
    out: dict[str, Any] = {
        "spec": spec,
        "throughput": rates,
        "peak_memory": result["peak_memory"],
        "memory_at_end": result["memory_at_end"],
        "simulation_wall_s": result["simulation_wall"],
        "process_wall_s": result["process_wall"],
        "load_average": result["load_average"],
        "ray_processes_left": result["ray_processes_left"],
        "stopped_by": result["stopped_by"],
        "faults": result["faults"],
    }
    if ceiling is not None:
        out["ceiling_updates_per_s"] = ceiling["used"]
        out["ceiling_external_cores_used"] = ceiling["external_cores_used"]
        out["overhead_vs_ceiling"] = 1.0 - rates["steady_updates_per_s"] / ceiling["used"]
    if spec["strategy"] in ("ASGD", "GSGM"):
        out["server_time"] = server_time(result)
    return out


def figures_and_targets(runs: dict[str, Any], task_seconds: float) -> dict[str, Any]:
    """The headline figures, and each target that the runs made measurable."""
    phase_runs = {n: r for n, r in runs.items() if not n.startswith("memory")}
    server_ms = {
        n: r["server_time"]["busy_ms_per_update"]
        for n, r in phase_runs.items()
        if "server_time" in r
    }
    share = {n: ms / (1e3 * task_seconds) for n, ms in server_ms.items()}
    overhead = {n: r["overhead_vs_ceiling"] for n, r in phase_runs.items()}
    vs_floor = {}
    for n, r in phase_runs.items():
        floor = runs.get(f"{r['spec']['work']}-floor")
        if floor is not None and n != f"{r['spec']['work']}-floor":
            vs_floor[n] = 1 - (
                r["throughput"]["steady_updates_per_s"]
                / floor["throughput"]["steady_updates_per_s"]
            )
    cpu = {
        n: r["throughput"]["cpu_overhead"] for n, r in phase_runs.items() if n.startswith("spin")
    }
    figures: dict[str, Any] = {
        "server_ms_per_update": server_ms,
        "server_share_of_client_compute": share,
        "overhead_vs_ceiling": overhead,
        "overhead_vs_floor": vs_floor,
        "cpu_overhead_spin": cpu,
    }
    targets: dict[str, bool | None] = {}
    if share:
        targets["ServerApp time per update <= 10% of client compute"] = max(share.values()) <= 0.1
    if "sleep-ASGD" in overhead:
        targets["ASGD sleep: 1 - rate/ceiling <= 10%"] = overhead["sleep-ASGD"] <= 0.1
    if "spin-ASGD" in cpu:
        targets["ASGD spin: CPU not spent on client work <= 10%"] = cpu["spin-ASGD"] <= 0.1
        # Wall-clock rates of CPU-bound work mean something only when nothing else ran.
        quiet = (
            max(
                runs["spin-ASGD"]["throughput"]["external_cores_used"],
                runs["spin-ASGD"]["ceiling_external_cores_used"],
            )
            < QUIET
        )
        targets["ASGD spin: 1 - rate/ceiling <= 10% (wall clock)"] = (
            overhead["spin-ASGD"] <= 0.1 if quiet else None
        )
    for name, run in runs.items():
        if name.startswith("memory"):
            m = run["peak_memory"]
            figures[name] = {"peak_pss_gib": m["pss"] / GIB, "peak_rss_sum_gib": m["rss"] / GIB}
            targets[f"{name}: peak PSS <= 4 GiB"] = m["pss"] <= 4 * GIB
            targets[f"{name}: peak summed RSS <= 4 GiB"] = m["rss"] <= 4 * GIB
    return {"figures": figures, "targets": targets}


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def print_report(report: dict[str, Any]) -> None:
    nan = float("nan")
    fig = report["figures"]
    print(f"\nmodel {report['params']:,} float32; {report['nodes']} nodes; {report['actors']} "
          f"actors x {report['cpus_per_actor']} CPU on {report['machine']['cores']} cores; "
          f"client work {report['task_seconds']} s per task")  # fmt: skip
    for work, c in report["ceilings"].items():
        print(f"ceiling {work}: {c['used']:.2f} updates/s = {c['loops']} plain loops (before "
              f"{c['before']['rate']:.2f}, after {c['after']['rate']:.2f}; nominal "
              f"{c['before']['nominal']:.2f}; other processes used up to "
              f"{c['external_cores_used']:.2f} cores)")  # fmt: skip
    print(f"\n{'run':13s} {'upd/s':>6s} {'ceiling':>7s} {'overhead':>8s} {'vs floor':>8s} "
          f"{'util':>5s} {'pickup':>6s} {'gap':>5s} {'server':>6s} {'CPU':>6s} {'CPU ovh':>7s} "
          f"{'ext':>5s}")  # fmt: skip
    print(" " * 52 + "ms    ms ms/upd ms/upd       cores")
    for name, run in report["runs"].items():
        if name.startswith("memory"):
            continue
        t = run["throughput"]
        print(
            f"{name:13s} {t['steady_updates_per_s']:6.2f} {run['ceiling_updates_per_s']:7.2f} "
            f"{run['overhead_vs_ceiling']:8.1%} {fig['overhead_vs_floor'].get(name, nan):8.1%} "
            f"{t['actor_utilisation']:5.0%} {t['pickup_latency_ms_median']:6.0f} "
            f"{t['actor_gap_ms_median']:5.0f} {fig['server_ms_per_update'].get(name, nan):6.2f} "
            f"{1e3 * t['cpu_s_per_update']['total']:6.1f} "
            f"{fig['cpu_overhead_spin'].get(name, nan):7.1%} "
            f"{t['external_cores_used']:5.2f}"
        )  # fmt: skip
    for name, run in report["runs"].items():
        if "server_time" not in run or name.startswith("memory"):
            continue
        st = run["server_time"]
        print(f"\n{name}: ServerApp time per applied update {st['busy_ms_per_update']:.2f} ms "
              f"(loop {st['loop_s']:.1f} s - pulls {st['pull_s']:.2f} s - sleeps "
              f"{st['sleep_s']:.1f} s, over {st['calls'].get('_handle', 0)} updates)")  # fmt: skip
        if not name.startswith("sleep"):
            continue
        for part, ms in sorted(st["parts_ms_per_update"].items(), key=lambda kv: -kv[1]):
            if ms >= 0.05:
                print(f"  {part:40s} {ms:6.2f} ms")
    for name, run in report["runs"].items():
        if not name.startswith("memory"):
            continue
        m = run["peak_memory"]
        groups = ", ".join(f"{g} {gib(v['pss'])}" for g, v in sorted(m["groups"].items()))
        held = ", ".join(f"{k} {v}" for k, v in m.get("strategy_state_max", {}).items())
        print(f"\n{name} ({run['spec']['params']:,} params, max_in_flight "
              f"{run['spec']['max_in_flight']}): peak PSS {gib(m['pss'])} ({groups}); peak "
              f"summed RSS {gib(m['rss'])}; the strategy held at most: {held}; "
              f"{run['throughput']['applied_updates']} updates applied")  # fmt: skip
        if "server_time" in run:
            st = run["server_time"]
            print(f"  ServerApp {st['busy_ms_per_update']:.2f} ms per update (aggregator "
                  f"{st['parts_ms_per_update']['aggregator apply']:.2f} ms); pull "
                  f"{st['pull_ms_per_call']:.1f} ms per call")  # fmt: skip
    print("\ntargets:")
    for target, met in report["targets"].items():
        verdict = "n/a" if met is None else "met" if met else "NOT MET"
        print(f"  {verdict:7s} {target}")
    print(f"('n/a': other processes used >= {QUIET} cores during the CPU-bound measurement)")


def main() -> None:
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
    args = parser.parse_args()
    if args.child:
        run_child(json.loads(args.child[0]), Path(args.child[1]))
        return

    started = time.time()
    out = Path(args.out)
    log_dir = out.parent / "runtime_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    duration = 2.0 if args.quick else 4.0
    spin_units = calibrate_spin(args.task_seconds)
    ceilings: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for phase, specs in plan(args, spin_units).items():
        before = ceiling(args, phase, spin_units, duration) if phase != "memory" else None
        results = []
        for spec in specs:
            print(f"[{time.time() - started:4.0f} s] {spec['name']}: {spec['nodes']} nodes, "
                  f"{spec['updates']} updates", flush=True)  # fmt: skip
            results.append(simulate(spec, log_dir))
            if results[-1]["ray_processes_left"]:
                print(f"  Ray processes left: {results[-1]['ray_processes_left']}", flush=True)
        used = None
        if before is not None:
            after = ceiling(args, phase, spin_units, duration)
            used = max(before["rate"], after["rate"])  # the faster: overheads are not flattered
            ceilings[phase] = {
                "before": before, "after": after, "used": used, "loops": before["loops"],
                "external_cores_used": max(before["external_cores_used"],
                                           after["external_cores_used"]),
            }  # fmt: skip
        for result in results:
            runs[result["spec"]["name"]] = run = analyse(result, ceilings.get(phase))
            print(f"  {result['spec']['name']}: "
                  f"{run['throughput']['steady_updates_per_s']:.2f} updates/s"
                  + (f" (ceiling {used:.2f})" if used else ""), flush=True)  # fmt: skip

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
