"""Generate a 10,000-node Synthetic(1, 1) split as a simulation does, and time each part.

    nice -n 15 python benchmarks/synthetic.py [--nodes 10000] [--sample 200] [--no-full]

The parts, each with its wall time and its peak of traced memory (tracemalloc: every numpy
array, so every sample held), measured in a second pass so that tracing slows no timing:

- ``sizes``: every device's number of samples (no sample drawn);
- ``preflight``: what ``python -m fl_async.app`` checks before it starts (every label and owner);
- ``server``: the ServerApp's data (``load_run_data``: train labels, owners, the pooled test
  split) and its natural split into ``--nodes`` partitions;
- ``node``: one ClientApp call of ``load_node_data`` for ``--sample`` random nodes and the
  largest, cold (no node kept from an earlier call): mean, median and largest;
- ``full``: ``load_dataset('synthetic')``, every device's train features in memory, which no
  part of a run does (skip with ``--no-full``).

Prints a table and writes the figures, with the process's peak resident set size, as a compact
result (``measured.py``; ``blocks.py`` renders it) to ``--out`` (default
``benchmarks/results/synthetic.json``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from measured import header, write

from fl_async.clients import node_data
from fl_async.data import load_dataset, load_labels, load_owners
from fl_async.data_spec import DataSpec
from fl_async.partitioning import count_matrix

MiB = 1 << 20


def measure(work: Callable[[], Any]) -> tuple[float, float, Any]:
    """Seconds of one untraced call, MiB of the traced peak of a second, and the first's result."""
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    del result  # the traced call must not count the first call's arrays
    tracemalloc.start()
    result = work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak / MiB, result


def server_part(spec: DataSpec, nodes: int) -> tuple[Any, list[np.ndarray]]:
    """The ServerApp's data and split, as ``server_run.run`` makes them."""
    node_data._synthetic_server_data.cache_clear()
    data = node_data.load_run_data(spec, nodes)
    parts = spec.split(data.labels, nodes, owners=data.owners)
    count_matrix(data.labels, parts)
    return data, parts


def node_calls(run_config: dict[str, Any], nodes: list[int], num_nodes: int) -> list[float]:
    """Seconds of a cold ``load_node_data`` call for each of ``nodes``."""
    seconds = []
    for k in nodes:
        node_data._generated.cache_clear()
        start = time.perf_counter()
        node_data.load_node_data({"partition-id": k, "num-partitions": num_nodes}, run_config)
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes = devices")
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=200, help="nodes whose load is timed")
    parser.add_argument("--no-full", action="store_true", help="skip load_dataset('synthetic')")
    parser.add_argument("--out", default="benchmarks/results/synthetic.json")
    args = parser.parse_args(argv)
    started = header("synthetic")
    data, parts, sampled = measure_parts(args)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print_report(args, data, parts, peak_rss)
    write(
        {
            **started,
            "synthetic": {"alpha": args.alpha, "beta": args.beta, "seed": args.seed},
            "data": data,
            "parts": parts,
            "peak_rss_mib": round(peak_rss, 1),
            "sampled_nodes": sampled,
        },
        args.out,
    )
    return 0


def measure_parts(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The data's sizes, each part's seconds and peak MiB, and how many nodes were sampled."""
    run_config = {
        "dataset": "synthetic",
        "synthetic.alpha": args.alpha,
        "synthetic.beta": args.beta,
        "seed": args.seed,
    }
    spec = DataSpec.from_config(run_config)
    synthetic = node_data.synthetic_of(spec, args.nodes)
    parts: dict[str, dict[str, float]] = {}
    seconds, peak, sizes = measure(synthetic.sizes)
    parts["sizes"] = {"seconds": seconds, "peak_mib": peak}
    seconds, peak, _ = measure(
        lambda: (
            load_labels("synthetic", synthetic=synthetic),
            load_owners("synthetic", synthetic=synthetic),
        )
    )
    parts["preflight"] = {"seconds": seconds, "peak_mib": peak}
    seconds, peak, (server, split) = measure(lambda: server_part(spec, args.nodes))
    parts["server"] = {"seconds": seconds, "peak_mib": peak}
    sizes_by_node = np.array([len(p) for p in split])
    largest = int(np.argmax(sizes_by_node))
    rng = np.random.default_rng(args.seed)
    sample = [int(k) for k in rng.choice(args.nodes, min(args.sample, args.nodes), replace=False)]
    calls = node_calls(run_config, sample, args.nodes)
    seconds, peak, _ = measure(lambda: node_calls(run_config, [largest], args.nodes))
    parts["node"] = {
        "mean_seconds": float(np.mean(calls)),
        "median_seconds": float(np.median(calls)),
        "largest_seconds": seconds,
        "largest_peak_mib": peak,
        "largest_train_examples": int(sizes_by_node[largest]),
    }
    if not args.no_full:
        seconds, peak, _ = measure(lambda: load_dataset("synthetic", synthetic=synthetic))
        parts["full"] = {"seconds": seconds, "peak_mib": peak}
    data = {
        "devices": args.nodes,
        "samples": int(sizes.sum()),
        "train_examples": len(server.labels),
        "test_examples": len(server.test),
        "median_device": float(np.median(sizes)),
        "largest_device": int(sizes.max()),
        "node_train_examples_median": float(np.median(sizes_by_node)),
    }
    return data, parts, len(sample)


def print_report(
    args: argparse.Namespace, data: dict[str, Any], parts: dict[str, Any], peak_rss: float
) -> None:
    """The figures as a few lines of text."""
    print(
        f"Synthetic({args.alpha:g}, {args.beta:g}), seed {args.seed}: {data['devices']:,} devices"
        f" = nodes, {data['samples']:,} samples ({data['train_examples']:,} train, "
        f"{data['test_examples']:,} test); a device's median {data['median_device']:g}, the "
        f"largest {data['largest_device']:,}"
    )
    print(f"{'part':<11}{'seconds':>10}{'peak MiB':>10}")
    for name in ("sizes", "preflight", "server", "full"):
        if name in parts:
            print(f"{name:<11}{parts[name]['seconds']:>10.3f}{parts[name]['peak_mib']:>10.1f}")
    node = parts["node"]
    print(
        f"node load (cold, {args.sample} random nodes): mean {1000 * node['mean_seconds']:.2f} ms,"
        f" median {1000 * node['median_seconds']:.2f} ms; the largest node "
        f"({node['largest_train_examples']:,} train examples) {node['largest_seconds']:.3f} s, "
        f"{node['largest_peak_mib']:.1f} MiB"
    )
    print(f"peak resident set of this process: {peak_rss:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
