"""Table of ``readme_tests.py``'s result: the README's test command on a fresh clone, by step."""

from __future__ import annotations

from ._format import labelled_caption

BENCHMARK = "readme-tests"
TARGET = 480.0
"""Issue 22's bound on the whole command, in seconds (8 minutes)."""


def _row(name: str, figures: dict) -> str:
    return (
        f"| {name} | {figures['wall']:.0f} | {figures['busy-cpu']:.0f} | {figures['floor']:.0f} "
        f"| {figures['busy-cpu'] / figures['wall']:.2f} |"
    )


def table(result: dict) -> str:
    """Each step's wall time, busy CPU-seconds and floor; the whole against the target; the
    slowest tests."""
    cores, total = result["cpus"], result["total"]
    lines = [
        labelled_caption(result, "python benchmarks/readme_tests.py"),
        "",
        f"| step | wall s | busy CPU-s ({cores} cores) | floor s (CPU-s / {cores}) | cores busy |",
        "|---|---|---|---|---|",
        *(_row(f"`{s['step']}`", s) for s in result["steps"]),
        _row("the whole command", total),
        "",
        f"The whole command took {total['wall']:.0f} s against a target of {TARGET:.0f} s; with "
        f"every core busy all the time, the same work would still take {total['floor']:.0f} s. "
        f"pytest: {result['pytest']['summary']}.",
        "",
        "| slowest test phases | phase | s |",
        "|---|---|---|",
        *(
            f"| `{name}` | {phase} | {seconds:.1f} |"
            for name, phase, seconds in result["pytest"]["slowest"]
        ),
    ]
    return "\n".join(lines)
