"""Formatting shared by the tables: milliseconds, ratios and the provenance caption."""

from __future__ import annotations


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds to two decimals, or ``n/a``."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is zero."""
    return None if a is None or b is None or b == 0 else a / b


def caption(result: dict, command: str) -> str:
    """Where a result comes from: the command, commit, date, versions, CPUs and load average."""
    start, end = result["load"]
    return (
        f"`{command}` at commit {result['commit']} on {result['date']} ({result['versions']}; "
        f"{result['cpus']} CPUs; load average (1 min) {start:.1f} at the start, {end:.1f} at "
        f"the end)."
    )


def labelled_caption(result: dict, command: str) -> str:
    """``caption`` followed by the result's ``label``, the note its command was given."""
    return caption(result, command) + f" {result['label']}".rstrip()
