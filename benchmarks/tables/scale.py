"""Table of ``scale.py``'s bundled runs: one row per run, then the 10,000-to-100-node ratios."""

from __future__ import annotations

from ._format import ms, ratio

BENCHMARK = "scale"
TARGETS = {"memory-gib": 6.0, "ratio": 1.5}
"""Issue 15's targets at 10,000 nodes: summed PSS, and time per update against 100 nodes."""


def table(result: dict) -> str:
    """One row per run, then each strategy's 10,000-to-100-node ratios against the targets."""
    runs = sorted(result["runs"], key=lambda r: (r["strategy"], r["nodes"]))
    lines = [
        f"Commit {result['commit']}; {result['versions']}; `--updates {runs[0]['updates-asked']} "
        f"--actors {runs[0]['actors']}`; load average (1 min) at each run's start and end.",
        "",
        "| strategy | nodes | updates | peak PSS GiB | of which Ray actors | first update s "
        "| median gap ms | mean gap ms | wall s | final acc. | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        actors = r["groups-at-peak-gib"].get("Ray actors")
        accuracy = r.get("final-accuracy")
        lines.append(
            f"| {r['strategy']} | {r['nodes']:,} | {r['updates']:,} | {r['peak-pss-gib']:.2f} | "
            f"{'' if actors is None else f'{actors:.2f}'} | {r['first-update-wall']:.1f} | "
            f"{ms(r['median-gap'])} | {ms(r['mean-gap'])} | {r['wall-seconds']:.0f} | "
            f"{'n/a' if accuracy is None else f'{accuracy:.3f}'} | "
            f"{r['load'][0]:.1f} to {r['load'][1]:.1f} |"
        )
    lines += [
        "",
        f"| strategy | peak PSS at 10,000 (target ≤ {TARGETS['memory-gib']:g} GiB) | "
        f"median gap 10,000 / 100 | mean gap 10,000 / 100 | within "
        f"{TARGETS['ratio']:g}x (median / mean) |",
        "|---|---|---|---|---|",
    ]
    by_key = {(r["strategy"], r["nodes"]): r for r in runs}
    for strategy in sorted({r["strategy"] for r in runs}):
        small, large = by_key.get((strategy, 100)), by_key.get((strategy, 10_000))
        if small is None or large is None:
            continue
        median = ratio(large["median-gap"], small["median-gap"])
        mean = ratio(large["mean-gap"], small["mean-gap"])
        memory_ok = large["peak-pss-gib"] <= TARGETS["memory-gib"]
        within = "/".join(
            "n/a" if r is None else ("yes" if r <= TARGETS["ratio"] else "no")
            for r in (median, mean)
        )
        lines.append(
            f"| {strategy} | {large['peak-pss-gib']:.2f} ({'met' if memory_ok else 'not met'}) | "
            f"{'n/a' if median is None else f'{median:.2f}x'} | "
            f"{'n/a' if mean is None else f'{mean:.2f}x'} | "
            f"{within} |"
        )
    return "\n".join(lines)
