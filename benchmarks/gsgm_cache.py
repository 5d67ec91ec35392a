"""GSGM's per-update time with its cache spilled to disk, against the cache in memory.

Run by hand (not a test): ``python benchmarks/gsgm_cache.py``. For each model size, two GSGM
aggregators get the same updates from the same ``--nodes`` nodes (round-robin, so every update
reads and rewrites another node's cached gradient): ``memory`` (``cache_memory=None``) and
``disk`` (``cache_memory=0``: every gradient in the memory-mapped file). Their blocks of updates
are interleaved (memory, disk, memory, disk, ..., the order swapped every other pair), and every
other disk block runs ``cold``: the node's row is written back and evicted from the page cache
(``MADV_PAGEOUT``) just before its update (untimed), as when the file is larger than the memory
the system can give it. The figures to quote: the median over pairs of the ratio of their
median per-update times, and the ratio of each arm's median over all its updates. Small blocks
keep a pair's two halves close in time on a shared, noisy machine. Both end with the same
model, bit for bit (checked).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from typing import Any

import numpy as np
from aggregators import make_deltas, make_model
from measured import header, write

from fl_async.aggregators import GSGM, ClientUpdate

MADV_PAGEOUT = 21
"""Linux's madvise advice that writes back and reclaims pages (Python 3.11 does not name it)."""


def evict(agg: GSGM, node: int) -> None:
    """Write back and drop ``node``'s row from the page cache (reaches into the cache's file:
    a benchmark's business only)."""
    rows = agg._cache._file
    size = rows._row_size * 4
    start = agg._cache._rows[node] * size
    rows._map._mmap.flush(start, size)
    rows._map._mmap.madvise(MADV_PAGEOUT, start, size)


def timed_block(agg: GSGM, updates: list[ClientUpdate], *, cold: bool) -> tuple[list[float], int]:
    """Seconds of each ``apply`` in ``updates``, and the minor page faults they took."""
    times, faults = [], 0
    for update in updates:
        if cold:
            evict(agg, update.node_id)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        agg.apply(update)
        times.append(time.perf_counter() - start)
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return times, faults


def summarise(ratios: list[float], times: dict[str, list[float]], faults: dict[str, int]) -> dict:
    """One kind of disk block's figures: each arm's median over all its updates, their ratio,
    the per-pair ratios' median and quartiles, and each arm's minor page faults per update."""
    ratios = sorted(ratios)
    quartiles = statistics.quantiles(ratios, n=4)
    memory_ms, disk_ms = (statistics.median(times[key]) * 1e3 for key in ("memory", "disk"))
    return {
        "memory_ms_median": memory_ms,
        "disk_ms_median": disk_ms,
        "ratio_of_medians": disk_ms / memory_ms,
        "ratio_median": statistics.median(ratios),
        "ratio_quartiles": [quartiles[0], quartiles[2]],
        "ratio_min": ratios[0],
        "ratio_max": ratios[-1],
        "minor_faults_per_update": {key: n / len(times[key]) for key, n in faults.items()},
    }


def warmed_up(params: int, nodes: int, cache_dir: str) -> tuple[GSGM, GSGM, list]:
    """The memory and disk aggregators with every node cached, and the updates' deltas."""
    rng = np.random.default_rng(0)
    model = make_model(params, rng)
    deltas = make_deltas(model, rng)
    memory, disk = GSGM(), GSGM(cache_memory=0, cache_dir=cache_dir)
    for agg in (memory, disk):
        agg.init(model)
        for node in range(nodes):  # warm up: every node cached, its row written
            agg.apply(ClientUpdate(node_id=node, delta=deltas[node % 3]))
    node_mb = memory.cache_usage.memory_bytes / nodes / 2**20
    print(
        f"{params:,} values, {nodes:,} nodes ({node_mb:.2f} MiB a node): "
        f"memory {memory.cache_usage}, disk {disk.cache_usage}"
    )
    return memory, disk, deltas


def measure(params: int, nodes: int, rounds: int, block: int, cache_dir: str) -> dict[str, Any]:
    """Interleaved blocks of ``block`` updates, ``rounds`` pairs, on a ``params``-value model."""
    memory, disk, deltas = warmed_up(params, nodes, cache_dir)
    ratios: dict[str, list[float]] = {"disk": [], "cold": []}
    every = {arm: {"memory": [], "disk": []} for arm in ratios}
    faults = {arm: {"memory": 0, "disk": 0} for arm in ratios}
    for r in range(rounds):
        updates = [
            ClientUpdate(node_id=(r * block + i) % nodes, delta=deltas[(r * block + i) % 3])
            for i in range(block)
        ]
        arm = "cold" if r % 2 else "disk"
        order = [(memory, "memory", False), (disk, "disk", arm == "cold")]
        medians = {}
        for agg, key, evicted in order[::-1] if (r // 2) % 2 else order:
            times, taken = timed_block(agg, updates, cold=evicted)
            every[arm][key] += times
            faults[arm][key] += taken
            medians[key] = statistics.median(times)
        ratios[arm].append(medians["disk"] / medians["memory"])
    if not all(np.array_equal(a, b) for a, b in zip(memory.params, disk.params, strict=True)):
        raise AssertionError("the spilled cache changed the model")
    summary: dict[str, Any] = {
        "params": sum(p.size for p in memory.params),
        "nodes": nodes,
        "block": block,
        "same_model": True,
    }
    for arm, rows in ratios.items():
        summary[arm] = summarise(rows, every[arm], faults[arm])
        print(f"  {arm:5s}: {summary[arm]}")
    memory.close()
    disk.close()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=100, help="pairs of blocks per model size")
    parser.add_argument("--block", type=int, default=10, help="updates per block")
    parser.add_argument("--cache-dir", default=None, help="where the file goes (default: TMPDIR)")
    parser.add_argument("--out", default="benchmarks/results/gsgm_cache.json")
    args = parser.parse_args()
    cache_dir = args.cache_dir or tempfile.gettempdir()
    started = header("gsgm_cache")
    results = [measure(p, args.nodes, args.rounds, args.block, cache_dir) for p in args.params]
    write({**started, "cache_dir": cache_dir, "rounds": args.rounds, "results": results}, args.out)


if __name__ == "__main__":
    main()
