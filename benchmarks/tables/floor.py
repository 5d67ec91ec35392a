"""Table of ``floor.py``'s result: each workload's efficiency (floor / run), start-up, where the
run's CPU went and when the start-up's milestones passed."""

from __future__ import annotations

import statistics

BENCHMARK = "floor"
MILESTONES = (
    "simulation-started",
    "serverapp-started",
    "nodes-identified",
    "step-0-evaluated",
    "finished",
    "command-done",
)
GROUPS = ("Ray actors", "simulation", "Ray services", "SuperLink", "SuperExec")


def _spread(triple: list[float], digits: int = 1) -> str:
    median, low, high = triple
    return f"{median:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def _ms(triple: list[float]) -> str:
    """Milliseconds: whole ones, or tenths below ten (a linear model's floor is under one)."""
    return _spread(triple, 0 if triple[0] >= 10 else 1)


def _summary_rows(result: dict) -> list[str]:
    lines = [
        "| workload | runs | efficiency | run s | baseline run s | floor s | start-up s "
        "| baseline start-up s | ms / update, run | ms / update, floor | load before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, workload in result["workloads"].items():
        s, runs = workload["summary"], workload["runs"]
        base = workload.get("baseline")
        loads = [r["load-before"] for r in runs]
        lines.append(
            f"| {name} | {len(runs)} | {_spread(s['efficiency'], 2)} | {_spread(s['run-wall'])} "
            f"| {'' if base is None else _spread(base['run-wall'])} "
            f"| {_spread(s['floor'])} | {_spread(s['startup'])} "
            f"| {'' if base is None else _spread(base['startup'])} "
            f"| {_spread(s['run-ms-per-update'], 0)} | {_ms(s['floor-ms-per-update'])} "
            f"| {min(loads):.1f}–{max(loads):.1f} |"
        )
    return lines


def _cpu_rows(result: dict) -> list[str]:
    lines = [
        "| workload | " + " | ".join(GROUPS) + " | other | total | cores busy | floor's CPU |",
        "|---|" + "---|" * (len(GROUPS) + 4),
    ]
    for name, workload in result["workloads"].items():
        runs = [r for r in workload["runs"] if r.get("cpu-in-run")]
        if not runs:
            continue
        cells = [statistics.median([r["cpu-in-run"].get(g, 0.0) for r in runs]) for g in GROUPS]
        total = statistics.median([r["cpu-in-run"]["total"] for r in runs])
        busy = statistics.median([r["cpu-in-run"]["total"] / r["run-wall"] for r in runs])
        floor_cpu = statistics.median([sum(r["floor-cpu"]) for r in runs])
        other = total - sum(cells)
        shown = " | ".join(f"{c:.1f}" for c in cells)
        lines.append(
            f"| {name} | {shown} | {other:.1f} | {total:.1f} | {busy:.2f} | {floor_cpu:.1f} |"
        )
    return lines


def _milestone_rows(result: dict) -> list[str]:
    lines = ["| workload | " + " | ".join(MILESTONES) + " |", "|---|" + "---|" * len(MILESTONES)]
    for name, workload in result["workloads"].items():
        lines.append(_milestone_row(name, workload["runs"]))
        baseline_runs = (workload.get("baseline") or {}).get("runs", [])
        if any("milestones" in r for r in baseline_runs):
            lines.append(_milestone_row(f"{name}, baseline", baseline_runs))
    return lines


def _milestone_row(name: str, runs: list[dict]) -> str:
    cells = []
    for milestone in MILESTONES:
        seen = [r["milestones"][milestone] for r in runs if milestone in r.get("milestones", {})]
        cells.append(f"{statistics.median(seen):.1f}" if seen else "n/a")
    return f"| {name} | " + " | ".join(cells) + " |"


def table(result: dict) -> str:
    """Efficiency and start-up per workload (median, min–max over the runs), the run's CPU
    seconds per process group (median), and the start-up's milestones (median seconds)."""
    baseline = result.get("baseline-commit")
    lines = [
        f"Commit {result['commit']}; {result['versions']}; {result['cores']} cores"
        + (f", GPU {result['gpu']}" if result.get("gpu", "none") != "none" else "")
        + (
            f"; baseline start-up: commit {baseline}, run right after each repeat"
            if baseline
            else ""
        )
        + ". Median (min–max) over the runs.",
        "",
        *_summary_rows(result),
        "",
        "CPU seconds within the run (step-0 evaluation to the end), median:",
        "",
        *_cpu_rows(result),
        "",
        "Seconds from the command's start to each milestone, median (the baseline's too, where"
        " it ran):",
        "",
        *_milestone_rows(result),
    ]
    return "\n".join(lines)
