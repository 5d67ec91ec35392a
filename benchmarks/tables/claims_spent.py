"""Table of ``claims_spent.py``'s result: the claims study's hours spent against its estimate."""

from __future__ import annotations

from ._format import labelled_caption

BENCHMARK = "claims-spent"


def _row(suite: dict) -> str:
    ratio = suite["spent-hours"] / suite["estimate-hours"] if suite["estimate-hours"] else 0.0
    return (
        f"| {suite['name']} | {suite['finished']} of {suite['planned']} | "
        f"{suite['estimate-hours']:.1f} | {suite['spent-hours']:.1f} | {ratio:.2f} | "
        f"{suite['suite-estimate-hours']:.1f} | {2 * suite['suite-estimate-hours']:.1f} |"
    )


def table(result: dict) -> str:
    """Per suite: runs finished, the estimate's hours for them two at a time, the hours the
    machine spent on them, their ratio, and the whole suite's estimate and twice it."""
    return "\n".join(
        [
            labelled_caption(result, "python benchmarks/claims_spent.py"),
            "",
            f"Estimate from {result['compute']}, two runs at a time at its pace. Spent: the hours "
            "covered by the finished runs' intervals (each run's start and its strategy's wall "
            "time; not the launcher's start, nor runs cut off and started again, nor a resumed "
            "run's parts before its last: a lower bound).",
            "",
            "| suite | runs finished | estimate for them, hours | spent on them, hours | spent / "
            "estimate | suite's estimate, hours | twice it |",
            "|---|---|---|---|---|---|---|",
            *(_row(suite) for suite in result["suites"]),
        ]
    )
