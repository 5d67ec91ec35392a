"""What ``runtime.py`` makes of one simulation's measurements: update rates after the first
cycle of replies, the process tree's CPU, and the ServerApp's time per update and its parts."""

from __future__ import annotations

import os
import statistics
from typing import Any

import numpy as np


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


def analyse(result: dict[str, Any], ceiling: dict[str, Any] | None) -> dict[str, Any]:
    """One run's entry in the report: its rates, memory, overhead against ``ceiling`` (the rate
    phases) and, for fl_async's strategies, the ServerApp's time per update."""
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
