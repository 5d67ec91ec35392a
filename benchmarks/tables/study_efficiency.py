"""Table of ``study_efficiency.py``'s result: each engine's wall time and efficiency."""

from __future__ import annotations

import statistics

from ._format import labelled_caption

BENCHMARK = "study-efficiency"


def efficiency(result: dict, wall: float) -> float:
    """The floor of every run's client work over ``wall``."""
    return sum(result["floors"].values()) / wall


def table(result: dict) -> str:
    """One row per engine: each pass's wall time, the median, simulations started, the first
    update's delay and the efficiency at the median wall time."""
    floor = sum(result["floors"].values())
    same = "the same with every engine" if result["same-histories"] else "**not** the same"
    lines = [
        labelled_caption(result, "python benchmarks/study_efficiency.py"),
        "",
        f"`fl-async bench {' '.join(result['bench-args'])}`, `--jobs {result['jobs']} --actors "
        f"{result['actors']}`: {result['passes'][0]['runs']} runs, whose client work (training "
        f"and central evaluations) takes {floor:.1f} s in {result['actors']} plain processes "
        f"(the floor). Histories (all but wall times and node ids): {same}.",
        "",
        "| engine | wall s, each pass | median | simulations started | first update after s "
        "| ms of wall per update | efficiency (floor / median wall) |",
        "|---|---|---|---|---|---|---|",
    ]
    for engine in result["engines"]:
        passes = [p for p in result["passes"] if p["engine"] == engine]
        walls = [p["wall"] for p in passes]
        median = statistics.median(walls)
        first = passes[0]["first-update-after"]
        lines.append(
            f"| {engine} | {', '.join(f'{w:.1f}' for w in walls)} | {median:.1f} | "
            f"{passes[0]['simulations']} | {'–' if first is None else f'{first:.1f}'} | "
            f"{1000 * median / passes[0]['updates']:.1f} | {efficiency(result, median):.2f} |"
        )
    walls = {
        e: statistics.median(p["wall"] for p in result["passes"] if p["engine"] == e)
        for e in result["engines"]
    }
    if {"study", "separate"} <= set(walls):
        lines += [
            "",
            f"The study engine did {walls['separate'] / walls['study']:.2f} times the work an "
            "hour of a simulation per run at the same runs at a time.",
        ]
    return "\n".join(lines)
