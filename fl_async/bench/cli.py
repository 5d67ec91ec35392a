"""``fl-async bench``: run strategies side by side on the same splits, speeds and seeds.

Example::

    fl-async bench --scenario a --strategies ssgd,asgd,gsgm --seeds 0,1 --out outputs/bench/a

Run it again with the same options to resume; ``--jobs K`` runs K at once; ``--report-only``
rewrites the report from the runs already there (or from a records folder); ``--export DIR``
writes the runs' records into DIR; ``--sweep GRIDFILE`` runs a grid of settings per strategy and
writes the best of each, which ``--tuned`` runs again. This module holds the options; the
commands are in ``fl_async.bench.commands``, the suite they describe in
``fl_async.bench.options``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fl_async.app import cluster
from fl_async.app.launch import add_tracking_arguments
from fl_async.bench.commands import (
    check_suite_folder,
    error_exit,
    run_and_report,
    run_export,
    run_report,
    write_choice,
)
from fl_async.bench.engines import ENGINES
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.options import DEFAULT_STRATEGIES, build_spec, build_sweep
from fl_async.bench.scenarios import SCENARIOS, SPLITS, STRATEGIES
from fl_async.extras import require
from fl_async.validation import InvalidArgument, check_int, check_number

DEFAULT_ROUNDS = 10
DEFAULT_ACTORS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fl-async bench``."""
    _add_suite_arguments(parser)
    _add_run_arguments(parser)
    parser.add_argument(
        "--actors",
        type=int,
        default=None,
        help="ClientApps training at once (default: 2; not with a Ray cluster)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        default=None,
        help="run every run on the Ray cluster whose head is there (default: $RAY_ADDRESS, "
        "else a Ray of each run's own)",
    )
    _add_sweep_arguments(parser)
    _add_output_arguments(parser)


def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of a sweep, of tuned settings and of running several runs at once."""
    parser.add_argument(
        "--sweep",
        metavar="GRIDFILE",
        default=None,
        help="run every point of the grid file's per-strategy grids (TOML or JSON) and write "
        "the best point of each strategy to <out>/tuned.json (with --report-only: from the "
        "runs or records already there)",
    )
    parser.add_argument(
        "--tuned",
        metavar="TUNED_JSON",
        default=None,
        help="also run each strategy of --strategies that this sweep record chose settings for, "
        "with them, as <strategy>-tuned",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs going at once (default: 1), in one simulation per node count; records do "
        "not change",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="study",
        help="study: a suite's runs share one Flower simulation per node count, started once "
        "(default); separate: each run its own simulation",
    )
    parser.add_argument(
        "--records",
        metavar="DIR",
        default=None,
        help="the records folder of this suite's runs made elsewhere (another machine or "
        "session): a run it holds with the same run config is not run again",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a run after this much wall time and count it as failed (default: no limit)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that run nothing: the report and the export."""
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--report-only",
        action="store_true",
        help="only rewrite the report from finished runs (or from a records folder)",
    )
    only.add_argument(
        "--export",
        metavar="DIR",
        default=None,
        help="write the records of --out's finished runs into DIR (runs nothing)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --export: add the runs DIR lacks to the records folder DIR (a suite run in "
        "parts), keeping every record already there",
    )


def _add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options choosing the suite: scenario, strategies, seeds, splits and its folder."""
    parser.add_argument(
        "--scenario", default="a", help=f"one of {', '.join(SCENARIOS)} (default: a)"
    )
    parser.add_argument(
        "--strategies",
        default=None,
        help=f"comma-separated subset of {','.join(STRATEGIES)} (default: {DEFAULT_STRATEGIES}; "
        "with --sweep: those of its grid file, default all)",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    parser.add_argument(
        "--splits",
        default="",
        help=f"comma-separated subset of the scenario's splits ({', '.join(SPLITS)}; "
        "default: all of the scenario's)",
    )
    parser.add_argument(
        "--out", default=None, help="the suite folder (created; resumed if it exists)"
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options shaping every run: dataset, nodes, budget and run-config overrides."""
    _add_data_arguments(parser)
    _add_budget_arguments(parser)


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options naming the data: dataset, its folder and the number of nodes."""
    parser.add_argument(
        "--dataset",
        default=None,
        help="the run config's dataset (default: the scenario's; mnist, embedded, but for s)",
    )
    parser.add_argument(
        "--data-root",
        default=None,
        help="where --dataset's files are (the run config's data-root; default: "
        "$FL_ASYNC_DATA, else ~/.cache/fl-async)",
    )
    parser.add_argument(
        "--nodes", type=int, default=None, help="virtual nodes (default: the scenario's)"
    )


def _add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of the budget, the grid and the run-config overrides."""
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help="SSGD rounds; their virtual time is every other strategy's budget "
        f"(default: {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--max-virtual-time",
        type=float,
        default=None,
        help="a fixed virtual-time budget for every run instead of --rounds",
    )
    parser.add_argument(
        "--grid",
        type=int,
        default=None,
        help="compare every run at this many equally spaced virtual times over the budget "
        f"(default: {DEFAULT_GRID}; --report-only: the suite's)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=PRESET [KEY=VALUE ...]",
        help="also run PRESET under NAME with these run-config overrides (repeatable), e.g. "
        '"gsgm-m0=gsgm gsgm.momentum=0.0"',
    )
    parser.add_argument(
        "--run-config",
        default="",
        help="more run-config overrides for every run, as for flwr run "
        '(e.g. "gsgm.momentum=0.8 local-epochs=1")',
    )
    add_tracking_arguments(parser)  # each run its own TensorBoard folder or MLflow run


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the suite or sweep, then write its report (and a sweep's choice); or only
    the report or the export. 2 on bad input, 1 if a run failed (not by its own rule; or a
    sweep could choose no setting)."""
    ray_address = None
    try:
        spec = build_spec(args)
        sweep = build_sweep(args)
        _check_combinations(args)
        if not args.report_only and args.export is None:
            check_suite_folder(Path(args.out))
            require("fl-async bench", "ray", "matplotlib")
            ray_address = cluster.resolve_address(args.ray_address, os.environ)
            cluster.check_options(ray_address, args.actors, "")
            if ray_address is not None:
                cluster.check_reachable(ray_address)
    except (InvalidArgument, ModuleNotFoundError) as error:
        return error_exit(error)
    out = Path(args.out)
    if args.export is not None:
        return run_export(out, Path(args.export), args.grid, merge=args.merge)
    if args.report_only:
        status = run_report(out, args.grid)
    else:
        actors = args.actors or DEFAULT_ACTORS
        status = run_and_report(
            spec,
            out,
            actors,
            ray_address,
            jobs=args.jobs,
            engine=args.engine,
            run_timeout=args.run_timeout,
            records=None if args.records is None else Path(args.records),
        )
    if sweep is None or status == 2:
        return status
    return max(status, write_choice(out, *sweep, args.grid))


def _check_combinations(args: argparse.Namespace) -> None:
    """Options that go only with others, and the values build_spec does not read."""
    if args.out is None:
        raise InvalidArgument("--out is required (the suite folder)")
    if args.merge and args.export is None:
        raise InvalidArgument("--merge goes with --export")
    if args.records is not None and (args.report_only or args.export is not None):
        raise InvalidArgument(
            "--records goes with running a suite: --report-only and --export read --out only"
        )
    if args.sweep is not None and args.export is not None:
        raise InvalidArgument("--export takes no --sweep: export the sweep's folder as a suite")
    check_int("--jobs", args.jobs, minimum=1)
    if args.run_timeout is not None:
        check_number("--run-timeout", args.run_timeout, minimum=0, min_open=True)
