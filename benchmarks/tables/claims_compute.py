"""Table of ``claims_compute.py``'s result: the claims study's hours, suite by suite."""

from __future__ import annotations

from ._format import labelled_caption

BENCHMARK = "claims-compute"
SESSION_HOURS = 2.5
"""The compute a 3-hour session leaves for runs; a run longer than this needs a kept disk."""


def _row(name: str, suite: dict) -> str:
    longest = suite["longest"]
    name += " (cut)" if suite.get("cut") else ""
    over = " (longer than a session)" if longest["hours"] > SESSION_HOURS else ""
    seeds = ", ".join(map(str, suite["input-seeds"]))
    inputs = f"{suite['folder']}, {suite['split']}, seeds {seeds}"
    return (
        f"| {name} | {len(suite['runs'])} | {inputs} | {suite['wall-per-seed']:.0f} | "
        f"{suite['rounds']} | {suite['factor']:g} | {suite['hours']:.1f} | "
        f"{longest['run']} seed {longest['seed']}: {longest['hours']:.2f}{over} |"
    )


def _pace(result: dict) -> str:
    """How two at a time was paced: measured for some scenarios, assumed for the rest."""
    assumed = result["two-at-a-time"]
    measured = sorted(
        {(s["scenario"], s["pace"], s["pace-from"]) for s in result["suites"] if "pace" in s}
    )
    if not measured:
        return f"{assumed:g} times the work an hour"
    shown = [
        f"scenario ({sc}) {pace:g} times the work an hour, measured ({src})"
        for sc, pace, src in measured
    ]
    if any("pace" not in s for s in result["suites"]):
        shown.append(f"the others {assumed:g}, assumed")
    return "; ".join(shown)


def table(result: dict) -> str:
    """Per suite: its runs per seed, inputs, wall s per seed at 10 rounds, R, factor, hours and
    its longest run; then the total of the suites run, one at a time and two at a time, and with
    the cut suites."""
    suites = result["suites"]
    ran = [s for s in suites if not s.get("cut")]
    run = sum(s["hours"] for s in ran)
    total = sum(s["hours"] for s in suites)

    def paced(chosen: list[dict]) -> float:
        return sum(s["hours"] / s.get("pace", result["two-at-a-time"]) for s in chosen)

    lines = [
        labelled_caption(result, "python benchmarks/claims_compute.py"),
        "",
        f"Estimate: wall s per seed at 10 SSGD rounds × R / 10 × {result['seeds']} seeds × the "
        "factor, in hours one run at a time; the longest run: its input's wall time × R / 10 × "
        "the factor.",
        "",
        "| suite | runs per seed | inputs | wall s per seed at 10 rounds | R | × | estimate, hours "
        "| longest run, hours |",
        "|---|---|---|---|---|---|---|---|",
        *(_row(suite["name"], suite) for suite in suites),
        f"| all run | | | | | | {run:.1f} | |",
    ]
    summary = (
        f"The suites run: {run:.0f} hours one run at a time; two at a time ({_pace(result)}): "
        f"{paced(ran):.0f} hours."
    )
    if total > run:
        lines.append(f"| with the cut suites | | | | | | {total:.1f} | |")
        summary += f" With the cut suites: {total:.0f} and {paced(suites):.0f} hours."
    return "\n".join([*lines, "", summary])
