"""Table of ``partitioning.py``'s result: each partitioning scheme's best time."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "partitioning"


def table(result: dict) -> str:
    """One row per scheme: its parameters, best time and whether it is within the budget."""
    budget = result["budget_seconds"]
    lines = [
        caption(result, "python benchmarks/partitioning.py"),
        "",
        f"{result['num_labels']:,} labels ({result['num_classes']} classes) into "
        f"{result['num_partitions']:,} partitions (`natural`: {result['num_owners']:,} owner "
        f"ids); best of {result['repeats']} runs.",
        "",
        f"| scheme | parameters | seconds | within {budget:g} s |",
        "|---|---|---|---|",
    ]
    for scheme, seconds in result["seconds"].items():
        params = ", ".join(f"{k} {v}" for k, v in result["params"][scheme].items()) or "none"
        lines.append(
            f"| {scheme} | {params} | {seconds:.3f} | {'yes' if seconds <= budget else 'no'} |"
        )
    return "\n".join(lines)
