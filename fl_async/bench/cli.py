"""``fl-async bench``: run strategies side by side on the same splits, speeds and seeds.

Example::

    fl-async bench --scenario a --strategies ssgd,asgd,gsgm --seeds 0,1 --out outputs/bench/a

Run it again with the same options to resume; ``--report-only`` rewrites the report from the
runs already there (or from a records folder); ``--export DIR`` writes the runs' records into
DIR; ``--tables FILE.md`` rewrites the Markdown file's generated tables from records folders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from fl_async.app import cluster
from fl_async.bench.blocks import rewrite_tables
from fl_async.bench.export import export_suite, is_records_folder, merge_suite
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.report import REPORT, write_records_report, write_report
from fl_async.bench.runner import SUITE_FILE, SuiteError, SuiteSpec, planned_runs, run_suite
from fl_async.bench.scenarios import (
    SCENARIOS,
    SPLITS,
    STRATEGIES,
    Variant,
    check_variant_name,
    replace_splits,
)
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
    _add_output_arguments(parser)


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that run nothing: the report, the export and the generated tables."""
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
    only.add_argument(
        "--tables",
        metavar="MARKDOWN",
        default=None,
        help="rewrite the generated blocks of MARKDOWN from their records folders (no --out)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --tables: write nothing, exit 1 naming each block that is out of date",
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
        default="ssgd,asgd,gsgm",
        help=f"comma-separated subset of {','.join(STRATEGIES)} (default: ssgd,asgd,gsgm)",
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
    parser.add_argument(
        "--dataset", default="mnist", help="the run config's dataset (default: mnist, embedded)"
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


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the suite, then write its report; or only the report, the export or the
    tables. 2 on bad input, 1 if a run failed (or, with --check, a table is out of date)."""
    if args.tables is not None:
        return run_tables(Path(args.tables), check=args.check)
    ray_address = None
    try:
        spec = build_spec(args)
        if args.out is None:
            raise InvalidArgument("--out is required (the suite folder) unless --tables is given")
        if args.check:
            raise InvalidArgument("--check goes with --tables")
        if args.merge and args.export is None:
            raise InvalidArgument("--merge goes with --export")
        if not args.report_only and args.export is None:
            _check_suite_folder(Path(args.out))
            require("fl-async bench", "ray", "matplotlib")
            ray_address = cluster.resolve_address(args.ray_address, os.environ)
            cluster.check_options(ray_address, args.actors, "")
            if ray_address is not None:
                cluster.check_reachable(ray_address)
    except (InvalidArgument, ModuleNotFoundError) as error:
        return _error(error)
    out = Path(args.out)
    if args.export is not None:
        return run_export(out, Path(args.export), args.grid, merge=args.merge)
    if args.report_only:
        return run_report(out, args.grid)
    return run_and_report(spec, out, args.actors or DEFAULT_ACTORS, ray_address)


def run_and_report(spec: SuiteSpec, out: Path, actors: int, ray_address: str | None = None) -> int:
    """Run the suite's missing runs into ``out`` (on the Ray cluster at ``ray_address``, if
    given), then write its report; 1 if a run failed."""
    from fl_async.data.download import DownloadError

    started = time.monotonic()
    try:
        check_dataset(spec)
        outcome = run_suite(spec, out, actors=actors, ray_address=ray_address)
    except SuiteError as error:
        return _error(error)
    except DownloadError as error:  # data-download=true, and the fetch failed
        print(f"fl-async bench: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fl-async bench: interrupted; run the same command again to resume")
        write_report(out, title=_title(spec), grid_size=spec.grid)
        return 130
    total = len(planned_runs(spec, out))
    print(
        f"fl-async bench: {len(outcome.ran)} ran, {len(outcome.skipped)} already done, "
        f"{len(outcome.failed)} failed, {len(outcome.blocked)} waiting for SSGD, of {total}, "
        f"in {time.monotonic() - started:.0f} s"
    )
    paths = write_report(out, title=_title(spec), grid_size=spec.grid)
    print(f"fl-async bench: report in {out / REPORT}; wrote {', '.join(str(p) for p in paths)}")
    return 1 if outcome.failed or outcome.blocked else 0


def run_report(out: Path, grid: int | None) -> int:
    """``--report-only``: the report of a suite folder's histories or of a records folder."""
    if not out.is_dir():
        return _error(f"no suite folder {out}")
    try:
        if is_records_folder(out):
            if grid is not None:
                raise InvalidArgument(
                    "--grid does not apply to a records folder (its grids are in its records): "
                    "export the suite again with --grid"
                )
            paths = write_records_report(out, _recorded_title(out))
        else:
            paths = write_report(out, _recorded_title(out), _recorded_grid(out, grid))
    except InvalidArgument as error:
        return _error(error)
    print(f"fl-async bench: report in {out / REPORT}; wrote {', '.join(str(p) for p in paths)}")
    return 0


def run_export(out: Path, dest: Path, grid: int | None, *, merge: bool = False) -> int:
    """``--export DIR``: the records of the suite folder's finished runs, written into DIR
    (``merge``: added to the records folder DIR, keeping the records it holds)."""
    try:
        grid_size = _recorded_grid(out, grid) if out.is_dir() else DEFAULT_GRID
        if merge:
            paths, notes = merge_suite(out, dest, grid_size)
        else:
            paths, notes = export_suite(out, dest, grid_size), []
    except InvalidArgument as error:
        return _error(error)
    for note in notes:
        print(f"fl-async bench: {note}")
    action = "merged" if merge else "exported"
    print(f"fl-async bench: {action} {len(paths) - 1} runs of {out} to {dest}")
    return 0


def run_tables(markdown: Path, check: bool = False) -> int:
    """``--tables FILE.md``: rewrite its generated blocks (``check``: exit 1 naming each block
    that differs from its records, write nothing)."""
    try:
        blocks, changed = rewrite_tables(markdown, check=check)
    except InvalidArgument as error:
        return _error(error)
    if check:
        for block in changed:
            print(
                f"fl-async bench: {markdown}: {block.name} differs from its records; "
                f"run fl-async bench --tables {markdown}",
                file=sys.stderr,
            )
        return 1 if changed else 0
    print(f"fl-async bench: {markdown}: {len(changed)} of {len(blocks)} generated blocks rewritten")
    return 0


def _check_suite_folder(out: Path) -> None:
    """A records folder holds no runs to resume: refuse to run a suite into it."""
    if out.is_dir() and is_records_folder(out):
        raise SuiteError(f"{out} is a records folder: use --report-only, or another --out")


def _error(error: object) -> int:
    print(f"fl-async bench: error: {error}", file=sys.stderr)
    return 2


def build_spec(args: argparse.Namespace) -> SuiteSpec:
    """The suite the options describe; a bad value raises InvalidArgument (SuiteError is one)
    naming it and the allowed ones."""
    scenario = SCENARIOS.get(str(args.scenario).lower())
    if scenario is None:
        raise SuiteError(f"unknown scenario {args.scenario!r}; allowed: {', '.join(SCENARIOS)}")
    strategies = _names(args.strategies, STRATEGIES, "strategy")
    if args.splits:
        scenario = replace_splits(scenario, _names(args.splits, scenario.splits, "split"))
    seeds = _seeds(args.seeds)
    nodes = check_int("--nodes", scenario.nodes if args.nodes is None else args.nodes, minimum=1)
    rounds = check_int("--rounds", args.rounds, minimum=1)
    max_virtual_time = args.max_virtual_time
    if max_virtual_time is not None:  # not allow_none: the option is left out, never "None"
        max_virtual_time = check_number(
            "--max-virtual-time", max_virtual_time, minimum=0, min_open=True
        )
    if args.actors is not None:
        check_int("--actors", args.actors, minimum=1)
    grid = check_int("--grid", DEFAULT_GRID if args.grid is None else args.grid, minimum=2)
    extra = _overrides(args.run_config)
    variants = _variants(args.variant, strategies)
    strategies = (*strategies, *variants)
    if args.data_root is not None:
        if "data-root" in extra:
            raise SuiteError("give the data folder once: --data-root or data-root in --run-config")
        root = Path(args.data_root).expanduser()
        if not root.is_dir():
            raise SuiteError(f"--data-root {args.data_root!r} is not a folder")
        # absolute, because the runs start in other working directories
        extra["data-root"] = str(root.resolve())
    return SuiteSpec(
        scenario=scenario,
        strategies=strategies,
        seeds=seeds,
        dataset=args.dataset,
        nodes=nodes,
        rounds=rounds,
        max_virtual_time=max_virtual_time,
        extra=extra,
        grid=grid,
        variants=variants,
    )


def check_dataset(spec: SuiteSpec) -> None:
    """Read the dataset's labels once before any run starts, so a missing or unknown dataset
    stops the suite with the loader's message instead of failing every run; with
    ``data-download=true`` in ``--run-config``, fetch a missing one first (DownloadError if
    that fails)."""
    from fl_async.data import load_labels
    from fl_async.data.download import ensure, is_downloadable

    root = spec.extra.get("data-root") or None
    root = str(root) if root else None
    if spec.extra.get("data-download") is True:
        fetched = ensure(spec.dataset, root=root, report=print)
        if fetched is not None:
            print(f"fl-async bench: {fetched.summary()}")
    try:
        load_labels(spec.dataset, root=root)
    except (FileNotFoundError, ValueError) as error:
        fetch = ""
        if isinstance(error, FileNotFoundError) and is_downloadable(spec.dataset):
            fetch = ", or add data-download=true to --run-config"
        raise SuiteError(f"--dataset {spec.dataset!r}: {error}{fetch}") from error


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip().lower() for n in str(text).split(",") if n.strip()))
    if not names:
        raise SuiteError(f"no {what} given; allowed: {', '.join(allowed)}")
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SuiteError(f"unknown {what} {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return names


def _seeds(text: str) -> tuple[int, ...]:
    seeds = []
    for word in str(text).split(","):
        word = word.strip()
        if not word.isdigit():
            raise SuiteError(f"bad seed {word!r} in --seeds {text!r}; allowed: integers >= 0")
        seeds.append(int(word))
    return tuple(dict.fromkeys(seeds))


def _variants(texts: list[str], strategies: tuple[str, ...]) -> dict[str, Variant]:
    """``--variant NAME=PRESET [KEY=VALUE ...]`` options, by name."""
    variants: dict[str, Variant] = {}
    for text in texts:
        head, _, overrides = str(text).strip().partition(" ")
        name, equals, preset = head.partition("=")
        if not equals:
            raise SuiteError(f"--variant {text!r}: expected NAME=PRESET [KEY=VALUE ...]")
        try:
            check_variant_name(name)
        except ValueError as error:
            raise SuiteError(f"--variant {text!r}: {error}") from error
        if name in variants or name in strategies:
            raise SuiteError(f"--variant {text!r}: the name {name!r} is given twice")
        if preset not in STRATEGIES:
            raise SuiteError(
                f"--variant {text!r}: unknown preset {preset!r}; allowed: {', '.join(STRATEGIES)}"
            )
        found = _overrides(overrides, option=f"--variant {name}")
        foreign = sorted(
            k for k in found if k.partition(".")[0] in STRATEGIES and k.partition(".")[0] != preset
        )
        if foreign:
            raise SuiteError(
                f"--variant {text!r}: {', '.join(foreign)} would be ignored by {preset!r}; "
                f"set {preset}.* keys or run-config keys shared by every strategy"
            )
        variants[name] = Variant(name, preset, found)
    return variants


def _overrides(text: str, option: str = "--run-config") -> dict[str, object]:
    if not text.strip():
        return {}
    import click
    from flwr.common.config import parse_config_args

    try:
        found = parse_config_args([text])
    except click.ClickException as error:
        raise SuiteError(f"{option} {text!r}: {error.message}") from error
    reserved = {"strategy", "seed", "num-nodes", "num-rounds", "max-virtual-time", "output-dir"}
    clash = sorted((reserved | {"eval-grid"}) & set(found))
    if clash:
        raise SuiteError(
            f"{option} may not set {', '.join(clash)}: use --strategies, --seeds, --nodes, "
            "--rounds, --max-virtual-time, --grid and --out"
        )
    return dict(found)


def _recorded_title(out: Path) -> str:
    """The title of the suite the folder holds (``--report-only`` takes no suite options)."""
    settings = _recorded_settings(out)
    if not settings:
        return "fl-async bench"
    return (
        f"fl-async bench: scenario {settings['scenario']} ({settings['description']}), "
        f"{settings['dataset']}, {settings['nodes']} nodes"
    )


def _recorded_grid(out: Path, given: int | None) -> int:
    """G of a derived grid for ``--report-only``: ``--grid`` if given, else the suite's."""
    if given is not None:
        return given  # build_spec checked it
    return int(_recorded_settings(out).get("grid") or DEFAULT_GRID)


def _recorded_settings(out: Path) -> dict:
    """The suite's settings: a suite folder's latest call, or a records folder's settings."""
    path = out / SUITE_FILE
    suite = json.loads(path.read_text()) if path.is_file() else {}
    return suite.get("latest") or suite.get("settings") or {}


def _title(spec: SuiteSpec) -> str:
    return (
        f"fl-async bench: scenario {spec.scenario.name} ({spec.scenario.description}), "
        f"{spec.dataset}, {spec.nodes} nodes"
    )
