"""Time every partitioning scheme on 1M labels (10 classes) into 1,000 partitions.

``natural`` splits by owner: each label gets one of ``--num-owners`` integer owner ids (3,500 by
default, about as many as FEMNIST has writers).

    python benchmarks/partitioning.py [--out benchmarks/results/partitioning.json]

Prints the best of ``--repeats`` wall-clock times per scheme and writes them as a compact result
(``measured.py``; ``blocks.py`` renders it). Exits with
code 1 if any scheme is slower than ``--budget`` seconds (the target is 1 s).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from measured import header, write

from fl_async.partitioning import partition

# Parameters of the runs; the skewed schemes at their usual experiment settings.
CASES: dict[str, dict[str, float | int]] = {
    "iid": {},
    "dirichlet": {"alpha": 0.5},
    "label_skew": {"classes_per_partition": 2},
    "shards": {"shards_per_partition": 2},
    "quantity_skew": {"alpha": 0.5},
    "natural": {},
}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 1 if a scheme misses the budget."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-labels", type=int, default=1_000_000)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--num-partitions", type=int, default=1_000)
    parser.add_argument("--num-owners", type=int, default=3_500, help="natural: owner ids")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds allowed per scheme")
    parser.add_argument("--out", default="benchmarks/results/partitioning.json")
    args = parser.parse_args(argv)

    started = header("partitioning")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, args.num_classes, args.num_labels)
    owners = rng.integers(0, args.num_owners, args.num_labels)
    seconds = {}
    for scheme, params in CASES.items():
        if scheme == "natural":
            params = {**params, "owners": owners}
        times = []
        for repeat in range(args.repeats):
            start = time.perf_counter()
            partition(labels, scheme, args.num_partitions, repeat, **params)
            times.append(time.perf_counter() - start)
        seconds[scheme] = min(times)

    print(
        f"{args.num_labels:,} labels, {args.num_classes} classes -> {args.num_partitions:,} "
        f"partitions, best of {args.repeats}"
    )
    print(f"{'scheme':<15}{'seconds':>9}  within {args.budget:g} s")
    for scheme, best in seconds.items():
        print(f"{scheme:<15}{best:>9.3f}  {'yes' if best <= args.budget else 'NO'}")

    write(
        {
            **started,
            "num_labels": args.num_labels,
            "num_classes": args.num_classes,
            "num_partitions": args.num_partitions,
            "num_owners": args.num_owners,
            "repeats": args.repeats,
            "params": CASES,
            "seconds": seconds,
            "budget_seconds": args.budget,
        },
        args.out,
    )
    return 0 if all(best <= args.budget for best in seconds.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
