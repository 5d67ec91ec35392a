"""Table of ``guard_runs.py``'s result: the update guard's refusals and departures per run."""

from __future__ import annotations

from ._format import labelled_caption

BENCHMARK = "guard-runs"


def _reach(run: dict, name: str) -> str:
    """The largest ratio and the count over the factor, or ``–`` where norms were not kept."""
    found = run.get(name)
    if found is None:
        return "–"
    return f"{found['max']:.1f} / {_count(found['over'], found.get('over-nodes'))}"


def _count(updates: int, nodes: int | None) -> str:
    """A count of updates, with the nodes that sent them where there are any and the result
    counted them."""
    if not updates or nodes is None:
        return str(updates)
    return f"{updates} ({nodes} node{'' if nodes == 1 else 's'})"


def table(result: dict) -> str:
    """One row per run: refusals, nodes that left, final accuracy, updates, and the reach of
    honest updates over both references."""
    factor = f"{result['factor']:g}"
    lines = [
        labelled_caption(result, "python benchmarks/guard_runs.py"),
        "",
        f"Refused: updates the run's guard refused as too large (and how many nodes sent them). "
        f"Left: nodes that left the run. "
        f"Reach: the largest ratio of an update's norm to the reference over the accepted norms "
        f"before it, and how many updates (of how many nodes) exceeded {factor} times it (the "
        f"default factor); "
        f"updates: replies handled, accepted or refused; "
        f"per update: the median of the last {result['window']} accepted norms; per node: the "
        f"median, over the last {result['window']} nodes accepted, of each one's latest "
        f"accepted norm; – where the run kept no norms.",
        "",
        "| suite | split | run | refused | left (of nodes) | final acc. % | updates "
        "| reach, per update | reach, per node |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for suite, runs in result["suites"].items():
        for key, run in runs.items():
            split, name = key.split("/")
            lines.append(
                f"| {suite} | {split} | {name} | "
                f"{_count(run['refused'], run.get('refused-nodes'))} | {run['left']} of "
                f"{run['nodes']} | {run['final-accuracy']:.1f} | {run['updates']} | "
                f"{_reach(run, 'per-update')} | {_reach(run, 'per-node')} |"
            )
    return "\n".join(lines)
