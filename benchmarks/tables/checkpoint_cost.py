"""Table of ``checkpoint_cost.py``'s result: a checkpoint's cost as the history grows."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "checkpoint_cost"


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f}"


def _row(row: dict) -> str:
    """One history length: each arm's median seconds a save, their ratio, the files' sizes."""
    seconds, sizes = row["seconds_median"], row["bytes"]
    return (
        f"| {row['records']:,} | {row['evaluations']:,} | {seconds['whole']:.2f} | "
        f"{seconds['journal']:.3f} | **{row['ratio']:.0f}** | {_mib(sizes['whole'])} | "
        f"{_mib(sizes['journal'])} + {_mib(sizes['journal_file'])} |"
    )


def table(result: dict) -> str:
    """One row per history length."""
    rows = result["results"]
    same = all(row["same_state"] for row in rows)
    return "\n".join(
        [
            caption(result, "python benchmarks/checkpoint_cost.py"),
            "",
            f"A model of {result['params']:,} float32 values; each journal save appends "
            f"{result['every']} update records (a central evaluation every "
            f"{result['eval_every']}); {result['pairs']} saves an arm per length, interleaved; "
            f"both arms' files load back to the same state: {'yes' if same else 'NO'}.",
            "",
            "| update records | evaluations | s / save, whole file | s / save, journal | whole ÷ "
            "journal | MiB, whole file | MiB, checkpoint + journal |",
            "|---|---|---|---|---|---|---|",
            *map(_row, rows),
        ]
    )
