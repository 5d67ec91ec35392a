"""Table of ``loop_profile.py``'s result: the event loop's own time per update, by node count."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "loop_profile"


def table(result: dict) -> str:
    """One row per strategy and node count; CPU per update also against the fewest nodes."""
    runs = sorted(result["runs"], key=lambda r: (r["strategy"], r["nodes"]))
    fewest = {}
    for r in runs:
        fewest.setdefault(r["strategy"], r)
    lines = [
        caption(result, "python benchmarks/loop_profile.py"),
        "",
        f"{result['updates']:,} updates a run, steady part from the update at "
        f"{result['steady-from']:.0%}; each figure the median of {result['repeats']} runs.",
        "",
        "| strategy | nodes | CPU per update µs | against the fewest nodes | median wall gap µs "
        "| mean wall gap µs |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        base = fewest[r["strategy"]]
        lines.append(
            f"| {r['strategy']} | {r['nodes']:,} | {r['cpu-us']:,.0f} | "
            f"{r['cpu-us'] / base['cpu-us']:.2f}x | {r['median-gap-us']:,.0f} | "
            f"{r['mean-gap-us']:,.0f} |"
        )
    return "\n".join(lines)
