"""The headline figures and targets of ``runtime.py``'s runs, and the report it prints."""

from __future__ import annotations

from typing import Any

GIB = 1024**3
QUIET = 0.2
"""Cores other processes may use during a CPU-bound measurement for its wall clock to count."""


def figures_and_targets(runs: dict[str, Any], task_seconds: float) -> dict[str, Any]:
    """The headline figures, and each target that the runs made measurable."""
    figures = _phase_figures(runs, task_seconds)
    targets = _phase_targets(runs, figures)
    for name, run in runs.items():
        if name.startswith("memory"):
            m = run["peak_memory"]
            figures[name] = {"peak_pss_gib": m["pss"] / GIB, "peak_rss_sum_gib": m["rss"] / GIB}
            targets[f"{name}: peak PSS <= 4 GiB"] = m["pss"] <= 4 * GIB
            targets[f"{name}: peak summed RSS <= 4 GiB"] = m["rss"] <= 4 * GIB
    return {"figures": figures, "targets": targets}


def _phase_figures(runs: dict[str, Any], task_seconds: float) -> dict[str, Any]:
    """The figures of the rate phases' runs (``sleep-*``, ``spin-*``; not the memory runs)."""
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
    return {
        "server_ms_per_update": server_ms,
        "server_share_of_client_compute": share,
        "overhead_vs_ceiling": overhead,
        "overhead_vs_floor": vs_floor,
        "cpu_overhead_spin": cpu,
    }


def _phase_targets(runs: dict[str, Any], figures: dict[str, Any]) -> dict[str, bool | None]:
    """The rate phases' targets that ``figures`` (``_phase_figures``) measured: met, not met, or
    None where other processes used too much of the machine for the wall clock to count."""
    share = figures["server_share_of_client_compute"]
    overhead = figures["overhead_vs_ceiling"]
    cpu = figures["cpu_overhead_spin"]
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
    return targets


def gib(value: float) -> str:
    """``value`` bytes in GiB, two decimals."""
    return f"{value / GIB:.2f} GiB"


def print_report(report: dict[str, Any]) -> None:
    """Print ``report`` (what ``runtime.py`` writes): the set-up and ceilings, the rates, the
    ServerApp's time per update, the memory runs and the targets."""
    _print_setup(report)
    _print_rates(report)
    _print_server_times(report)
    _print_memory(report)
    _print_targets(report)


def _print_setup(report: dict[str, Any]) -> None:
    print(
        f"\nmodel {report['params']:,} float32; {report['nodes']} nodes; {report['actors']} "
        f"actors x {report['cpus_per_actor']} CPU on {report['machine']['cores']} cores; "
        f"client work {report['task_seconds']} s per task"
    )
    for work, c in report["ceilings"].items():
        print(
            f"ceiling {work}: {c['used']:.2f} updates/s = {c['loops']} plain loops (before "
            f"{c['before']['rate']:.2f}, after {c['after']['rate']:.2f}; nominal "
            f"{c['before']['nominal']:.2f}; other processes used up to "
            f"{c['external_cores_used']:.2f} cores)"
        )


def _print_rates(report: dict[str, Any]) -> None:
    nan = float("nan")
    fig = report["figures"]
    print(
        f"\n{'run':13s} {'upd/s':>6s} {'ceiling':>7s} {'overhead':>8s} {'vs floor':>8s} "
        f"{'util':>5s} {'pickup':>6s} {'gap':>5s} {'server':>6s} {'CPU':>6s} {'CPU ovh':>7s} "
        f"{'ext':>5s}"
    )
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
        )


def _print_server_times(report: dict[str, Any]) -> None:
    for name, run in report["runs"].items():
        if "server_time" not in run or name.startswith("memory"):
            continue
        st = run["server_time"]
        print(
            f"\n{name}: ServerApp time per applied update {st['busy_ms_per_update']:.2f} ms "
            f"(loop {st['loop_s']:.1f} s - pulls {st['pull_s']:.2f} s - sleeps "
            f"{st['sleep_s']:.1f} s, over {st['calls'].get('_handle', 0)} updates)"
        )
        if not name.startswith("sleep"):
            continue
        for part, ms in sorted(st["parts_ms_per_update"].items(), key=lambda kv: -kv[1]):
            if ms >= 0.05:
                print(f"  {part:40s} {ms:6.2f} ms")


def _print_memory(report: dict[str, Any]) -> None:
    for name, run in report["runs"].items():
        if not name.startswith("memory"):
            continue
        m = run["peak_memory"]
        groups = ", ".join(f"{g} {gib(v['pss'])}" for g, v in sorted(m["groups"].items()))
        held = ", ".join(f"{k} {v}" for k, v in m.get("strategy_state_max", {}).items())
        print(
            f"\n{name} ({run['spec']['params']:,} params, max_in_flight "
            f"{run['spec']['max_in_flight']}): peak PSS {gib(m['pss'])} ({groups}); peak "
            f"summed RSS {gib(m['rss'])}; the strategy held at most: {held}; "
            f"{run['throughput']['applied_updates']} updates applied"
        )
        if "server_time" in run:
            st = run["server_time"]
            print(
                f"  ServerApp {st['busy_ms_per_update']:.2f} ms per update (aggregator "
                f"{st['parts_ms_per_update']['aggregator apply']:.2f} ms); pull "
                f"{st['pull_ms_per_call']:.1f} ms per call"
            )


def _print_targets(report: dict[str, Any]) -> None:
    print("\ntargets:")
    for target, met in report["targets"].items():
        verdict = "n/a" if met is None else "met" if met else "NOT MET"
        print(f"  {verdict:7s} {target}")
    print(f"('n/a': other processes used >= {QUIET} cores during the CPU-bound measurement)")
