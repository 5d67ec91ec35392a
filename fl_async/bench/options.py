"""``fl-async bench``'s options made into a suite (``SuiteSpec``): scenario, strategies and their
variants (``--variant``, ``--tuned``, a sweep's points), seeds, budget and run-config keys."""

from __future__ import annotations

import argparse
from pathlib import Path

from fl_async.app.launch import tracking_overrides
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.runner import BASELINE, SuiteError, SuiteSpec
from fl_async.bench.scenarios import (
    SCENARIOS,
    STRATEGIES,
    Variant,
    check_variant_name,
    replace_splits,
)
from fl_async.bench.sweep import SweepGrid, check_strategies, load_grid, sweep_variants
from fl_async.bench.tuning import load_tuned
from fl_async.tracking import mlflow_default_uri
from fl_async.validation import check_int, check_number

DEFAULT_STRATEGIES = "ssgd,asgd,gsgm"
TUNED_SUFFIX = "-tuned"
"""``--tuned`` runs a strategy's chosen settings under its name with this suffix."""


def build_spec(args: argparse.Namespace) -> SuiteSpec:
    """The suite the options describe; a bad value raises InvalidArgument (SuiteError is one)
    naming it and the allowed ones."""
    scenario = SCENARIOS.get(str(args.scenario).lower())
    if scenario is None:
        raise SuiteError(f"unknown scenario {args.scenario!r}; allowed: {', '.join(SCENARIOS)}")
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
    strategies, variants = _strategies(args, budget_from_baseline=max_virtual_time is None)
    return SuiteSpec(
        scenario=scenario,
        strategies=strategies,
        seeds=seeds,
        dataset=scenario.dataset if args.dataset is None else args.dataset,
        nodes=nodes,
        rounds=rounds,
        max_virtual_time=max_virtual_time,
        extra=_extra(args),
        grid=grid,
        variants=variants,
    )


def build_sweep(args: argparse.Namespace) -> tuple[SweepGrid, tuple[str, ...]] | None:
    """``--sweep GRIDFILE``'s grid and the strategies to sweep (``--strategies``, else every
    one in the file); None without ``--sweep``."""
    if args.sweep is None:
        return None
    grid = load_grid(Path(args.sweep))
    chosen = None if args.strategies is None else _names(args.strategies, None, "strategy")
    return grid, check_strategies(grid, chosen)


def _strategies(
    args: argparse.Namespace, *, budget_from_baseline: bool
) -> tuple[tuple[str, ...], dict[str, Variant]]:
    """The suite's run names and its variants: ``--strategies`` with ``--variant`` and
    ``--tuned`` ones, or a sweep's points (with SSGD first when it sets the budget)."""
    sweep = build_sweep(args)
    if sweep is not None:
        if args.variant or args.tuned:
            raise SuiteError("--sweep runs its grid's points: leave out --variant and --tuned")
        variants = sweep_variants(*sweep)
        baseline = (BASELINE,) if budget_from_baseline and BASELINE not in variants else ()
        points = {name: v for name, v in variants.items() if name != v.preset}
        return (*baseline, *variants), points
    strategies = _names(args.strategies or DEFAULT_STRATEGIES, STRATEGIES, "strategy")
    variants = _variants(args.variant, strategies)
    if args.tuned is not None:
        chosen = load_tuned(Path(args.tuned))
        tuned = [s for s in strategies if s in chosen]
        if not tuned:
            raise SuiteError(
                f"--tuned {args.tuned} chose settings for {', '.join(chosen) or 'no strategy'}, "
                f"none of --strategies {', '.join(strategies)}"
            )
        for strategy in tuned:
            name = strategy + TUNED_SUFFIX
            if name in variants:
                raise SuiteError(f"--variant {name} and --tuned both name {name!r}")
            variants[name] = Variant(name, strategy, chosen[strategy])
    return (*strategies, *variants), variants


def _extra(args: argparse.Namespace) -> dict[str, object]:
    """``--run-config``'s keys, with ``--data-root`` made absolute as ``data-root``."""
    extra = _overrides(args.run_config)
    if args.data_root is not None:
        if "data-root" in extra:
            raise SuiteError("give the data folder once: --data-root or data-root in --run-config")
        root = Path(args.data_root).expanduser()
        if not root.is_dir():
            raise SuiteError(f"--data-root {args.data_root!r} is not a folder")
        # absolute, because the runs start in other working directories
        extra["data-root"] = str(root.resolve())
    return {**extra, **_tracking(args)}


def _tracking(args: argparse.Namespace) -> dict[str, str]:
    """``--track``'s run-config keys for every run. TensorBoard: each run writes into its own
    output-dir (``tensorboard --logdir <out>`` shows them all) or under ``--track-uri``; MLflow:
    one store for the suite, ``sqlite:///<out>/mlflow.db`` unless ``--track-uri`` names one.
    Each run's ``tracking.run-name`` is set by ``SuiteSpec.config``."""
    uri = args.track_uri
    if args.track == "mlflow" and uri is None and args.out is not None:
        uri = mlflow_default_uri(Path(args.out).expanduser())
    return tracking_overrides(args.track, uri)


def _names(text: str, allowed: tuple[str, ...] | None, what: str) -> tuple[str, ...]:
    """Comma-separated names, lower-cased, each once; every one in ``allowed`` unless None."""
    names = tuple(dict.fromkeys(n.strip().lower() for n in str(text).split(",") if n.strip()))
    if not names:
        raise SuiteError(f"no {what} given; allowed: {', '.join(allowed or ())}")
    unknown = [n for n in names if allowed is not None and n not in allowed]
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
