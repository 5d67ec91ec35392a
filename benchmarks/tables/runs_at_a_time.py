"""Table of ``runs_at_a_time.py``'s result: the same runs' wall time at each ``--jobs``."""

from __future__ import annotations

import statistics

from ._format import labelled_caption

BENCHMARK = "runs-at-a-time"


def pace(result: dict) -> dict[int, float]:
    """Work an hour at each ``--jobs`` against the first one measured: that one's median wall
    time over this one's."""
    medians = {
        j: statistics.median(p["wall"] for p in result["passes"] if p["jobs"] == j)
        for j in result["jobs"]
    }
    first = medians[result["jobs"][0]]
    return {j: first / wall for j, wall in medians.items()}


def table(result: dict) -> str:
    """One row per ``--jobs``: each pass's wall time, their median and the work an hour."""
    first = result["jobs"][0]
    paces = pace(result)
    same = "the same in every pass" if result["same-histories"] else "**not** the same"
    lines = [
        labelled_caption(result, "python benchmarks/runs_at_a_time.py"),
        "",
        f"`fl-async bench {' '.join(result['bench-args'])}`, timed: {result['strategies']} "
        f"({result['runs']} runs a pass with SSGD's, made once first and not timed); passes "
        f"alternating, {result['repeat']} of each. Histories (all but wall times and node ids): "
        f"{same}.",
        "",
        f"| runs at a time | wall s, each pass | median | work an hour against {first} at a time |",
        "|---|---|---|---|",
    ]
    for j in result["jobs"]:
        walls = [p["wall"] for p in result["passes"] if p["jobs"] == j]
        shown = ", ".join(f"{w:.1f}" for w in walls)
        lines.append(f"| {j} | {shown} | {statistics.median(walls):.1f} | {paces[j]:.2f} |")
    return "\n".join(lines)
