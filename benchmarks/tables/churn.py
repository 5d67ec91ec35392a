"""Table of ``churn.py``'s result: the run under churn, its checks and its memory growth."""

from __future__ import annotations

BENCHMARK = "churn"


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def table(result: dict) -> str:
    """The churn run: its settings, what it applied and lost, each check, and memory growth."""
    s, run, memory = result["settings"], result["run"], result["memory-mib"]
    faults = ", ".join(f"{k} {v}" for k, v in sorted(run["faults"].items())) or "none"
    twice = "none" if not run["applied-twice"] else str(run["applied-twice"])
    lines = [
        f"`python benchmarks/churn.py --nodes {s['nodes']} --duration {s['duration']:g} "
        f"--kill-every {s['kill_every']:g} --down {s['down']:g} --timeout {s['timeout']:g} "
        f"--seed {s['seed']}` (ASGD, real clock): {result['kills']} SuperNodes killed with "
        f"SIGKILL and {result['restarts']} started again; PSS sampled every "
        f"{s['sample_every']:g} s.",
        "",
        "| stopped by | wall s | updates | faults | applied twice | nodes keyed by node id "
        "| final acc. |",
        "|---|---|---|---|---|---|---|",
        f"| {run['stopped-by']} | {run['wall-time']:.0f} | {run['num-updates']} | {faults} | "
        f"{twice} | {run['unidentified-nodes']} | {run['final-accuracy']:.1%} |",
        "",
        "| process | PSS max, first quarter (MiB) | PSS max, last quarter (MiB) | growth (MiB) "
        f"| within {s['memory_bound']:g} MiB |",
        "|---|---|---|---|---|",
    ]
    for name, key in (("ServerApp (`flwr-serverapp`)", "serverapp"), ("SuperLink", "superlink")):
        m = memory[key]
        lines.append(
            f"| {name} | {m['first-quarter-max']:.1f} | {m['last-quarter-max']:.1f} | "
            f"{m['growth']:+.1f} | {_yes(m['growth'] <= s['memory_bound'])} |"
        )
    checks = ", ".join(f"{name} {_yes(ok)}" for name, ok in result["checks"].items())
    return "\n".join([*lines, "", f"Checks: {checks}."])
