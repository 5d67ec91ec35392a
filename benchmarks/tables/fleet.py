"""Table of ``fleet.py``'s result: each strategy's accuracy and time to FedAvg's final accuracy."""

from __future__ import annotations

BENCHMARK = "fleet"


def table(result: dict) -> str:
    """One row per strategy: accuracy, updates, wall time and time to FedAvg's final accuracy."""
    verdict, runs = result["verdict"], result["runs"]
    target = verdict["target-accuracy"]
    lines = [
        f"| strategy | final acc. | best | updates | wall s | time to FedAvg's final "
        f"{target:.1%} (s) | fraction of FedAvg's wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    fedavg_wall = verdict["flwr-fedavg-wall-time"]
    for name in result["settings"]["strategies"]:
        run = runs[name]
        reached = verdict["time-to-target"].get(name)
        lines.append(
            f"| {name} | {run['final-accuracy']:.1%} | {run['best-accuracy']:.1%} | "
            f"{run['num-updates']} | {run['wall-time']:.0f} | "
            f"{'not reached' if reached is None else f'{reached:.0f}'} | "
            f"{'' if reached is None else f'{reached / fedavg_wall:.2f}'} |"
        )
    fraction = verdict["fraction-of-fedavg-wall-time"]
    lines += [
        "",
        f"Best asynchronous strategy: {verdict['best-async']}, at "
        f"{'n/a' if fraction is None else f'{fraction:.2f}'} of FedAvg's wall time "
        f"(target ≤ 0.5: {'met' if verdict['meets-half-of-fedavg'] else 'not met'}).",
    ]
    return "\n".join(lines)
