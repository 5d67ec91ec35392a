"""Table of ``claims_budget.py``'s result: SSGD's flatness by rounds on development seeds."""

from __future__ import annotations

from ._format import labelled_caption

BENCHMARK = "claims-budget"


def _split_table(name: str, split: dict) -> list[str]:
    seeds = sorted(split["seeds"], key=int)
    lines = [
        f"**{name}** ({split['dataset']}, {split['nodes']} nodes, {split['scheme']}): "
        f"the rule chooses R = {split['chosen'] or 'none of these'}.",
        "",
        "| SSGD rounds R | rule's mean (pts) | "
        + " | ".join(f"seed {s}: flatness / final acc." for s in seeds)
        + " |",
        "|---|---|" + "---|" * len(seeds),
    ]
    for index, rounds in enumerate(split["rounds"]):
        at = [split["seeds"][s][index] for s in seeds]
        cells = [f"{a['flatness']:+.1f} / {a['final']:.1f}%" for a in at]
        mark = " (chosen)" if rounds == split["chosen"] else ""
        lines.append(
            f"| {rounds}{mark} | {split['mean'][index]:+.1f} | " + " | ".join(cells) + " |"
        )
    return lines


def table(result: dict) -> str:
    """Per split: each R's mean flatness over the seeds and each seed's, and the choice."""
    lines = [
        labelled_caption(result, "python benchmarks/claims_budget.py"),
        "",
        f"Flatness: SSGD's mean grid accuracy over the last quarter of a budget of R rounds minus "
        f"over its third quarter (G = 40), in points. The rule: the smallest R whose mean over the "
        f"seeds, a negative flatness counted as 0, is at most {result['threshold']:.1f}.",
    ]
    for name, split in result["splits"].items():
        lines += ["", *_split_table(name, split)]
    return "\n".join(lines)
