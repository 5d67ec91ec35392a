"""Per-update time of every aggregation rule, as a multiple of one copy of the model.

Run by hand (not a test): ``python benchmarks/aggregators.py [--without-base] [--out FILE]``.
Targets (issue 2): ASGD <= 4x a copy, every rule <= 15x, GSGM with 1,000 cached nodes <= 1.5x
its time with 10. Writes a compact result (``measured.py``) that ``blocks.py`` renders.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from measured import header, write

from fl_async.aggregators import (
    ASGD,
    DCASGD,
    GSGM,
    SSGD,
    Aggregator,
    ClientUpdate,
    FedAsync,
    FedBuff,
    TrendSmooth,
)

RULES: dict[str, Callable[[], Aggregator]] = {
    "SSGD": SSGD,
    "SSGD(median)": lambda: SSGD(combine="median"),
    "SSGD(trimmed-mean)": lambda: SSGD(combine="trimmed-mean"),
    "ASGD": lambda: ASGD(lr=0.1),
    "FedAsync": FedAsync,
    "FedBuff": lambda: FedBuff(buffer_size=10),
    "FedBuff(median)": lambda: FedBuff(buffer_size=10, combine="median"),
    "FedBuff(trimmed-mean)": lambda: FedBuff(buffer_size=10, combine="trimmed-mean"),
    "DCASGD": DCASGD,
    "DCASGD(adaptive)": lambda: DCASGD(adaptive=True),
    "GSGM": GSGM,
    "TrendSmooth(sgd)": lambda: TrendSmooth(lr=0.1),
    "TrendSmooth(momentum)": lambda: TrendSmooth(lr=0.1, base="momentum"),
    "TrendSmooth(adam)": lambda: TrendSmooth(lr=0.01, base="adam"),
}


def make_model(num_params: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A model of ``num_params`` float32 values in four arrays, shaped like a small network."""
    big = num_params // 2
    quarter = num_params // 4
    rest = num_params - big - 2 * quarter
    shapes = [(big // 1000, 1000), (quarter // 1000, 1000), (quarter,), (rest,)]
    return [rng.normal(scale=0.05, size=s).astype(np.float32) for s in shapes]


def time_copy(model: list[np.ndarray], repeats: int) -> float:
    """Median seconds for one copy of the model (``[p.copy() for p in model]``)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        copies = [p.copy() for p in model]
        times.append(time.perf_counter() - start)
        del copies
    return statistics.median(times)


def time_rule(
    agg: Aggregator,
    model: list[np.ndarray],
    deltas: list[list[np.ndarray]],
    updates: int,
    num_nodes: int,
    with_base: bool = True,
) -> float:
    """Median seconds per update over ``updates`` updates from ``num_nodes`` nodes (staleness 0).

    A barrier rule (SSGD) is flushed, inside the timed update, once every node has reported.
    Without ``with_base``, rules that do not read the base get none (nor check it).
    """
    agg.init(model)
    base = [p.copy() for p in model] if with_base or agg.needs_base else None
    for node in range(num_nodes):  # warm up: every node cached, scratch allocated
        agg.apply(ClientUpdate(node_id=node, delta=deltas[node % len(deltas)], base=base))
    agg.flush()
    times = []
    for i in range(updates):
        update = ClientUpdate(
            node_id=i % num_nodes, delta=deltas[i % len(deltas)], base=base, staleness=0
        )
        start = time.perf_counter()
        agg.apply(update)
        if agg.held == num_nodes:
            agg.flush()
        times.append(time.perf_counter() - start)
    # Buffering rules step once per buffer: the mean spreads the step over its updates.
    return statistics.fmean(times) if isinstance(agg, (SSGD, FedBuff)) else statistics.median(times)


def make_deltas(model: list[np.ndarray], rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Three pseudo-gradients shaped like ``model``, cycled through by the timed updates."""
    return [
        [rng.normal(scale=1e-3, size=p.shape).astype(np.float32) for p in model] for _ in range(3)
    ]


def measure_rules(
    params: int, updates: int, rng: np.random.Generator, with_base: bool = True
) -> dict[str, Any]:
    """Every rule's time per update on a ``params``-value model, against copies of it timed just
    before and just after the rule (so that a busy machine's changing speed cancels out)."""
    model = make_model(params, rng)
    deltas = make_deltas(model, rng)
    print(f"model: {sum(p.size for p in model):,} float32 values")
    print(f"{'rule':24s} {'ms/update':>10s} {'copy ms':>8s} {'x copy':>8s}")
    results: dict[str, dict[str, float]] = {}
    for name, make in RULES.items():
        before = time_copy(model, repeats=15)
        seconds = time_rule(make(), model, deltas, updates, num_nodes=10, with_base=with_base)
        copy_s = (before + time_copy(model, repeats=15)) / 2
        results[name] = {
            "ms_per_update": seconds * 1e3,
            "copy_ms": copy_s * 1e3,
            "x_copy": seconds / copy_s,
        }
        print(f"{name:24s} {seconds * 1e3:10.2f} {copy_s * 1e3:8.2f} {seconds / copy_s:8.2f}")
    return {"params": params, "with_base": with_base, "rules": results}


def measure_gsgm_scaling(
    params: int, nodes: int, updates: int, rng: np.random.Generator
) -> dict[str, float]:
    """GSGM's time per update with ``nodes`` cached nodes against 10."""
    model = make_model(params, rng)
    deltas = make_deltas(model, rng)
    few = time_rule(GSGM(), model, deltas, updates, num_nodes=10)
    many = time_rule(GSGM(), model, deltas, updates, num_nodes=nodes)
    print(
        f"GSGM on {params:,} values: {few * 1e3:.2f} ms/update with 10 cached nodes, "
        f"{many * 1e3:.2f} ms with {nodes:,}: ratio {many / few:.2f}"
    )
    return {
        "params": params,
        "ms_10_nodes": few * 1e3,
        f"ms_{nodes}_nodes": many * 1e3,
        "ratio": many / few,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=int, default=4_000_000, help="model size (floats)")
    parser.add_argument("--updates", type=int, default=30, help="timed updates per rule")
    parser.add_argument(
        "--gsgm-params", type=int, default=1_000_000, help="model size for the 1,000-node test"
    )
    parser.add_argument("--gsgm-nodes", type=int, default=1000)
    parser.add_argument(
        "--without-base",
        action="store_true",
        help="send no base to the rules that do not read it (the cost of checking it)",
    )
    parser.add_argument("--out", default="benchmarks/results/aggregators.json")
    args = parser.parse_args()

    started = header("aggregators")
    rng = np.random.default_rng(0)
    measured = measure_rules(args.params, args.updates, rng, with_base=not args.without_base)
    scaling = measure_gsgm_scaling(args.gsgm_params, args.gsgm_nodes, args.updates, rng)
    results = measured["rules"]
    targets = {
        "asgd_x_copy<=4": results["ASGD"]["x_copy"] <= 4,
        "every_rule_x_copy<=15": all(r["x_copy"] <= 15 for r in results.values()),
        "gsgm_ratio<=1.5": scaling["ratio"] <= 1.5,
    }
    print(f"targets: {targets}")
    write(
        {
            **started,
            **measured,
            "updates": args.updates,
            "gsgm_scaling": scaling,
            "targets": targets,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
