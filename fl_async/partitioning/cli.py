"""``fl-async partition``: split a dataset's labels, print the metrics, write a plot and indices.

Bad input ends with one line on stderr naming the value and what is allowed, and exit code 2.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fl_async.extras import require
from fl_async.validation import InvalidArgument

from .metrics import heterogeneity
from .schemes import SCHEMES, partition, scheme_name, scheme_parameters

# Scheme parameter -> its command-line option; run() refuses options the scheme does not take.
_OPTIONS = {
    "alpha": "--alpha",
    "classes_per_partition": "--classes-per-partition",
    "shards_per_partition": "--shards-per-partition",
    "min_partition_size": "--min-partition-size",
    "self_balancing": "--self-balancing",
    "max_tries": "--max-tries",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``fl-async partition`` to ``parser``."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--dataset",
        metavar="NAME",
        help="dataset whose training labels are split, as named by fl_async.data "
        "(default: mnist, the embedded MNIST digits)",
    )
    source.add_argument("--labels", metavar="FILE", help=".npy or .npz file of integer labels")
    parser.add_argument("--data-root", metavar="DIR", help="where --dataset looks for its files")
    parser.add_argument(
        "--scheme", default="iid", help=f"one of {', '.join(SCHEMES)} (default: iid)"
    )
    parser.add_argument("--num-partitions", type=int, default=10, help="(default: 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default: 0)")
    parser.add_argument(
        "--alpha",
        type=float,
        help="dirichlet: label concentration; quantity_skew: size concentration (default 0.5)",
    )
    parser.add_argument("--classes-per-partition", type=int, help="label_skew: classes each")
    parser.add_argument("--shards-per-partition", type=int, help="shards: shards each")
    parser.add_argument(
        "--min-partition-size", type=int, help="dirichlet, quantity_skew: smallest partition"
    )
    parser.add_argument(
        "--self-balancing", action="store_true", help="dirichlet: flwr-datasets' self-balancing"
    )
    parser.add_argument("--max-tries", type=int, help="dirichlet, quantity_skew: draws allowed")
    parser.add_argument(
        "--owners",
        metavar="FILE",
        help="natural: .npy or .npz file of owner ids (integers or strings), one per label; "
        "an .npz may hold them as 'owners' beside 'labels' (default with --dataset: the "
        "dataset's own owners)",
    )
    parser.add_argument(
        "--owner-column",
        metavar="NAME",
        help="natural with --dataset: the Hugging Face column of the owners (default: writer_id)",
    )
    parser.add_argument("--plot", metavar="PATH", help="write a heatmap and stacked bars (PNG)")
    parser.add_argument("--out", metavar="PATH", help="write the indices (.npz)")
    parser.add_argument(
        "--per-partition", action="store_true", help="print one metrics row per partition"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``fl-async partition``; return the exit code."""
    try:
        _check_paths(args)
        if args.plot:
            require("--plot", "matplotlib")
        name = scheme_name(args.scheme)
        params = _scheme_params(args, name)
        labels, origin = _labels(args)
        owners = _owners(args, name, labels.size)
        if owners is not None:
            origin += f", {np.unique(owners).size} owners"
            parts = partition(labels, name, args.num_partitions, args.seed, owners=owners)
        else:
            parts = partition(labels, name, args.num_partitions, args.seed, **params)
        settings = ", ".join(f"{key}={value}" for key, value in params.items())
        print(f"{name}({settings}) of {origin}: {args.num_partitions} partitions, seed {args.seed}")
        print(heterogeneity(labels, parts).to_table(per_partition=args.per_partition))
        if args.plot:
            from .plots import plot_partitions

            plot_partitions(labels, parts, args.plot)
            print(f"wrote plot: {args.plot}")
        if args.out:
            _save(args.out, parts, name, args.num_partitions, args.seed, params)
            print(f"wrote indices: {args.out}")
    except (ValueError, TypeError, OSError, ModuleNotFoundError) as error:
        print(f"fl-async partition: error: {error}", file=sys.stderr)
        return 2
    return 0


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse output names before any work; np.savez would quietly append ".npz" to others."""
    for option, path, suffix in (("--plot", args.plot, ".png"), ("--out", args.out, ".npz")):
        if path and Path(path).suffix.lower() != suffix:
            raise InvalidArgument(f"{option} must end in {suffix}, got {path!r}")


def _scheme_params(args: argparse.Namespace, scheme: str) -> dict[str, Any]:
    """The scheme options given on the command line, refusing those the scheme does not take."""
    given = {key: getattr(args, key) for key in _OPTIONS}
    # Identity, not equality: "--alpha 0" must reach the check that refuses it, and 0 == False.
    given = {key: value for key, value in given.items() if value is not None and value is not False}
    # natural's owners are data, read by _owners; every other parameter is an option.
    takes = {k: v for k, v in scheme_parameters(scheme).items() if k != "owners"}
    for key in given:
        if key not in takes:
            options = ", ".join(_OPTIONS[p] for p in takes) or "no scheme options"
            raise InvalidArgument(
                f"{_OPTIONS[key]} does not apply to --scheme {scheme}; it takes: {options}"
            )
    for key, default in takes.items():
        if default is inspect.Parameter.empty and key not in given:
            raise InvalidArgument(f"--scheme {scheme} needs {_OPTIONS[key]}")
    return given


def _labels(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    """The labels to split and a short description of where they came from."""
    if args.labels:
        if args.data_root:
            raise InvalidArgument(
                "--data-root applies to --dataset, not to --labels; got --data-root "
                f"{args.data_root!r}"
            )
        return _read_labels(Path(args.labels)), args.labels
    from fl_async.data import load_labels

    name = args.dataset or "mnist"
    labels = load_labels(name, root=args.data_root)
    return labels, f"{name} ({labels.size} training labels)"


def _owners(args: argparse.Namespace, scheme: str, num_labels: int) -> np.ndarray | None:
    """The owner of each label for ``natural`` (None for the other schemes, which refuse
    --owners and --owner-column)."""
    if scheme != "natural":
        for option, value in (("--owners", args.owners), ("--owner-column", args.owner_column)):
            if value is not None:
                raise InvalidArgument(f"{option} applies to --scheme natural, not to {scheme}")
        return None
    if args.owners:
        if args.owner_column is not None:
            raise InvalidArgument(
                "--owner-column applies to --dataset, not to --owners; got --owner-column "
                f"{args.owner_column!r}"
            )
        return _read_array(Path(args.owners), "owners", "--owners")
    if args.labels:
        raise InvalidArgument("--scheme natural with --labels needs --owners FILE")
    from fl_async.data import load_owners

    return load_owners(args.dataset or "mnist", root=args.data_root, owner_column=args.owner_column)


def _read_labels(path: Path) -> np.ndarray:
    return _read_array(path, "labels", "--labels")


def _read_array(path: Path, key: str, option: str) -> np.ndarray:
    """The array of a .npy file, or the ``key`` (or only) array of an .npz file."""
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            if key in arrays.files:
                return arrays[key]
            if len(arrays.files) == 1:
                return arrays[arrays.files[0]]
            raise ValueError(
                f"{option} {path}: an .npz must hold a '{key}' array or exactly one array, "
                f"found {arrays.files}"
            )
    raise InvalidArgument(f"{option} must be a .npy or .npz file, got {str(path)!r}")


def _save(
    path: str,
    parts: list[np.ndarray],
    scheme: str,
    num_partitions: int,
    seed: int,
    params: dict[str, Any],
) -> None:
    """Write ``partition_<id>`` index arrays plus the scheme, its parameters and the seed."""
    arrays = {f"partition_{i}": part for i, part in enumerate(parts)}
    np.savez_compressed(
        path, **arrays, scheme=scheme, num_partitions=num_partitions, seed=seed, **params
    )
