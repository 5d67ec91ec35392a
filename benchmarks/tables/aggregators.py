"""Table of ``aggregators.py``'s result: each rule's time per update against one model copy."""

from __future__ import annotations

from ._format import caption

BENCHMARK = "aggregators"
TARGETS = {"ASGD": 4.0, "every rule": 15.0, "GSGM cache ratio": 1.5}
"""Issue 2's targets: times a copy per update (ASGD, every rule), GSGM's many-to-10-node ratio."""


def _met(value: float, target: float) -> str:
    return "met" if value <= target else "not met"


def table(result: dict) -> str:
    """One row per rule (ms and times a copy, against its target), then GSGM's cache ratio."""
    base = "a base sent with every update" if result["with_base"] else "no base sent"
    command = "python benchmarks/aggregators.py" + (
        "" if result["with_base"] else " --without-base"
    )
    lines = [
        caption(result, command),
        "",
        f"A model of {result['params']:,} float32 values in four arrays, 10 nodes, staleness 0, "
        f"{base}; median of {result['updates']} updates per rule (a buffering rule's mean, its "
        "step spread over its buffer), against a copy of the model timed just before and after "
        "it (copy ms).",
        "",
        "| rule | ms / update | copy ms | × copy | target (× copy) |",
        "|---|---|---|---|---|",
    ]
    for name, rule in result["rules"].items():
        target = TARGETS.get(name, TARGETS["every rule"])
        lines.append(
            f"| {name} | {rule['ms_per_update']:.2f} | {rule['copy_ms']:.2f} | "
            f"{rule['x_copy']:.2f} | ≤ {target:g} ({_met(rule['x_copy'], target)}) |"
        )
    gsgm = result["gsgm_scaling"]
    many = next(k for k in gsgm if k.startswith("ms_") and k != "ms_10_nodes")
    nodes = int(many.split("_")[1])
    target = TARGETS["GSGM cache ratio"]
    lines += [
        "",
        f"GSGM with {nodes:,} cached nodes against 10 ({gsgm['params']:,} values): "
        f"{gsgm[many]:.2f} against {gsgm['ms_10_nodes']:.2f} ms per update, ratio "
        f"{gsgm['ratio']:.2f} (target ≤ {target:g}: {_met(gsgm['ratio'], target)}).",
    ]
    return "\n".join(lines)
