"""A real fleet on the wall clock: Flower's FedAvg against fl-async's strategies on one machine.

Starts a SuperLink (``flower-superlink --insecure``) and ``--nodes`` SuperNodes on 127.0.0.1,
``--slow`` of them made ``--slowdown`` times slower for real (node config ``slowdown``: each
sleeps ``slowdown - 1`` times its measured compute time after a task). The same fleet then runs
each strategy in turn with ``flwr run <repo> <connection> --stream``, ``clock.type = 'real'``,
the same seed and run config: ``flwr-fedavg`` (Flower's own ``FedAvg``) for ``--rounds`` rounds
first, then every other strategy for the wall time FedAvg took (``--budget wall``, default) or
for the same number of updates (``--budget updates``). From each run's ``history.json``:
accuracy against wall time, and the wall time to reach ``--target`` (default: FedAvg's final
accuracy). Wall times count from each run's first evaluation (the initial model, step 0): a
preset first asks every node who it is, which costs a ClientApp start per node and would
otherwise count against it; the wall budget of the others is FedAvg's span from that point plus
``--startup-allowance`` seconds for that phase. Writes ``benchmarks/results/fleet-<time>.json``
and ``.png`` (one line per strategy); the runs' own outputs and the processes' logs stay in
``benchmarks/results/fleet-<time>/``.

The question it answers: does the best asynchronous strategy reach FedAvg's final accuracy in
at most half of FedAvg's wall time with two nodes 5x slower? Needs a quiet machine (every node
trains at once): ``python benchmarks/fleet.py`` (8 nodes, 2 at 5x, five strategies).

Every process is stopped by PID at the end, on failure or Ctrl-C/SIGTERM too; every wait is
bounded (``--run-timeout`` per run).
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the deployment helpers the deployment tests use

from flower_deployment import FlowerDeployment  # noqa: E402
from flower_processes import FlowerProcessError  # noqa: E402

from fl_async.app.flower_fedavg import FLOWER_FEDAVG  # noqa: E402
from fl_async.app.results import STARTED_AT  # noqa: E402
from fl_async.plotting import accuracy_axes, new_figure, save_figure  # noqa: E402
from fl_async.validation import InvalidArgument, check_choice  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_STRATEGIES = (FLOWER_FEDAVG, "ssgd", "asgd", "gsgm", "fedbuff")
ASYNC_FREE = {FLOWER_FEDAVG, "ssgd"}  # synchronous: not candidates for "best asynchronous"
TARGET_SPEEDUP = 2.0  # the best asynchronous strategy at most half FedAvg's wall time


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every run completed (whatever the figures say)."""
    args = _parser().parse_args(argv)
    strategies = _strategies(args.strategies)
    if FLOWER_FEDAVG not in strategies and args.budget == "wall" and not args.wall_time:
        raise SystemExit("--budget wall without flwr-fedavg needs --wall-time SECONDS")
    if not 0 <= args.slow <= args.nodes:
        raise SystemExit(f"--slow must lie in [0, --nodes={args.nodes}], got {args.slow}")
    if args.slowdown < 1:
        raise SystemExit(f"--slowdown must be >= 1, got {args.slowdown}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or RESULTS / f"fleet-{stamp}.json").resolve()
    workdir = out.with_suffix("")
    workdir.mkdir(parents=True, exist_ok=True)
    # SIGTERM as an exception: the deployment's __exit__ stops every process by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: dict[str, dict[str, Any]] = {}
    budget_wall = args.wall_time
    with FlowerDeployment(workdir / "flower", startup_timeout=args.startup_timeout) as fleet:
        fleet.start_superlink()
        # The slow nodes are the last ones: partition ids are stable identities either way.
        slow = set(range(args.nodes - args.slow, args.nodes))
        for k in range(args.nodes):
            extra = {"slowdown": args.slowdown} if k in slow else {}
            fleet.start_supernode(k, args.nodes, node_config=extra)
        fleet.wait_for_nodes(args.nodes, timeout=args.startup_timeout)
        print(f"fleet: SuperLink {fleet.address}, {args.nodes} SuperNodes, slow: {sorted(slow)}")
        for name in strategies:
            run_config = _run_config(args, name, workdir / name, budget_wall)
            history = _run(fleet, name, run_config, args.run_timeout)
            runs[name] = _summary(history, workdir / name)
            if name == FLOWER_FEDAVG and args.budget == "wall" and not args.wall_time:
                budget_wall = runs[name]["wall-time"] + args.startup_allowance
            print(
                f"{name}: final accuracy {runs[name]['final-accuracy']}, "
                f"{runs[name]['num-updates']} updates in {runs[name]['wall-time']:.1f} s"
            )
    left = fleet.leftovers()  # stopped on leaving the block: should be none
    target = args.target or (runs.get(FLOWER_FEDAVG) or {}).get("final-accuracy")
    result = _result(args, strategies, runs, target, sorted(slow), budget_wall, left)
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot = out.with_suffix(".png")
    _plot(runs, target, plot, args)
    print(json.dumps(result["verdict"], indent=1))
    print(f"wrote {out} and {plot}; runs and logs in {workdir}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--nodes", type=int, default=8, help="SuperNodes (default 8)")
    add("--slow", type=int, default=2, help="how many of them are slow (default 2)")
    add("--slowdown", type=float, default=5.0, help="how much slower they are (default 5)")
    add(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        help=f"comma-separated, run in this order (default {','.join(DEFAULT_STRATEGIES)})",
    )
    add("--rounds", type=int, default=10, help="FedAvg's rounds (default 10)")
    add(
        "--budget",
        choices=("wall", "updates"),
        default="wall",
        help="the others run for FedAvg's wall time (wall, default) or its number of updates",
    )
    add("--wall-time", type=float, default=0.0, help="wall budget in s instead of FedAvg's")
    add(
        "--startup-allowance",
        type=float,
        default=60.0,
        help="added to FedAvg's wall time as the others' budget, for their start (default 60)",
    )
    add("--target", type=float, default=0.0, help="target accuracy (default: FedAvg's final)")
    add("--seed", type=int, default=0)
    add("--local-epochs", type=int, default=1, help="local epochs per task (default 1)")
    add("--partition", default="dirichlet", help="partition.scheme (default dirichlet)")
    add("--run-config", default="", help="more run-config overrides, as for flwr run")
    add("--run-timeout", type=float, default=3600.0, help="longest wait for one run, s")
    add("--startup-timeout", type=float, default=120.0, help="longest wait for the fleet, s")
    add("--out", default="", help="result JSON (default benchmarks/results/fleet-<time>.json)")
    return parser


def _strategies(text: str) -> list[str]:
    from fl_async.config import FLOWER_STRATEGIES, STRATEGIES

    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    try:
        for name in names:
            check_choice("--strategies", name, STRATEGIES + FLOWER_STRATEGIES)
    except InvalidArgument as error:
        raise SystemExit(str(error)) from None
    # FedAvg first: it sets the wall budget and the target of the others.
    return sorted(dict.fromkeys(names), key=lambda name: name != FLOWER_FEDAVG)


def _run_config(
    args: argparse.Namespace, name: str, output: Path, wall: float
) -> dict[str, object]:
    config: dict[str, object] = {
        "strategy": name,
        "clock.type": "real",
        "num-nodes": args.nodes,
        "seed": args.seed,
        "local-epochs": args.local_epochs,
        "partition.scheme": args.partition,
        "threads": 1,  # every node trains at once on a shared machine
        "output-dir": str(output),
        "num-rounds": args.rounds,
    }
    if name != FLOWER_FEDAVG:
        if args.budget == "updates":
            config["max-updates"] = args.rounds * args.nodes
        else:
            # Wall time binds: num-rounds only caps the updates far above it.
            config["num-rounds"] = args.rounds * 1000
            config["max-wall-time"] = wall
    config.update(_overrides(args.run_config))
    return config


def _overrides(text: str) -> dict[str, object]:
    from flwr.common.config import parse_config_args

    return dict(parse_config_args([text])) if text else {}


def _run(
    fleet: FlowerDeployment, name: str, run_config: dict[str, object], timeout: float
) -> dict[str, Any]:
    print(f"{name}: flwr run with {run_config}", flush=True)
    proc = fleet.start_run(ROOT, run_config)
    code = fleet.wait_run(proc, timeout=timeout)
    history_path = Path(str(run_config["output-dir"])) / "history.json"
    if code != 0 or not history_path.is_file():
        raise FlowerProcessError(
            f"{name}: flwr run exited {code}, history.json "
            f"{'present' if history_path.is_file() else 'missing'}:\n{fleet.logs()}"
        )
    return json.loads(history_path.read_text())


def _summary(history: dict[str, Any], output: Path) -> dict[str, Any]:
    evaluations = [e for e in history["evaluations"] if "accuracy" in e]
    start = evaluations[0]["wall-time"] if evaluations else 0.0  # the initial model's evaluation
    points = [(e["wall-time"] - start, e["accuracy"]) for e in evaluations]
    return {
        "final-accuracy": history["final-accuracy"],
        "best-accuracy": max((a for _, a in points), default=None),
        "wall-time": history["wall-time"] - start,
        "start-up-wall-time": start,
        "num-updates": history["num-updates"],
        "stopped-by": history["stopped-by"],
        "faults": history["faults"],
        "updates-by-partition": _per_partition(history["updates"]),
        "accuracy-vs-wall-time": [[round(t, 3), a] for t, a in points],
        "output-dir": str(output),
    }


def _per_partition(updates: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for update in updates:
        key = str(update.get("partition-id", update.get("stable-id", "?")))
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: item[0]))


def time_to_target(points: list[list[float]], target: float | None) -> float | None:
    """The wall time of the first evaluation at or above ``target`` (None: never reached)."""
    if target is None:
        return None
    return next((t for t, accuracy in points if accuracy >= target), None)


def _result(
    args: argparse.Namespace,
    strategies: list[str],
    runs: dict[str, dict[str, Any]],
    target: float | None,
    slow: list[int],
    wall: float,
    left: list[int],
) -> dict[str, Any]:
    for run in runs.values():
        run["time-to-target"] = time_to_target(run["accuracy-vs-wall-time"], target)
    fedavg = runs.get(FLOWER_FEDAVG, {}).get("wall-time")
    candidates = {
        name: run["time-to-target"]
        for name, run in runs.items()
        if name not in ASYNC_FREE and run["time-to-target"] is not None
    }
    best = min(candidates, key=candidates.get) if candidates else None
    verdict: dict[str, Any] = {
        "target-accuracy": target,
        "flwr-fedavg-wall-time": fedavg,
        "best-async": best,
        "best-async-time-to-target": candidates.get(best) if best else None,
        "time-to-target": {name: run["time-to-target"] for name, run in runs.items()},
    }
    if fedavg and best:
        verdict["fraction-of-fedavg-wall-time"] = candidates[best] / fedavg
        verdict["meets-half-of-fedavg"] = candidates[best] <= fedavg / TARGET_SPEEDUP
    return {
        "benchmark": "fleet",
        "date": time.strftime(STARTED_AT),
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
        "settings": {
            **vars(args),
            "strategies": strategies,
            "slow-partitions": slow,
            "wall-budget": wall,
        },
        "verdict": verdict,
        "runs": runs,
        "processes-left-after-stop": left,
    }


def _plot(runs: dict[str, dict[str, Any]], target: float | None, path: Path, args) -> None:
    figure = new_figure((7.0, 4.2))
    axes = figure.add_subplot()
    for name, run in runs.items():
        points = run["accuracy-vs-wall-time"]
        axes.plot(
            [t for t, _ in points], [a for _, a in points], marker="o", markersize=3, label=name
        )
    if target is not None:
        axes.axhline(target, color="black", linestyle=":", linewidth=1, label="target")
    accuracy_axes(axes, "wall time (s)")
    axes.set_title(
        f"{args.nodes} SuperNodes on 127.0.0.1, {args.slow} of them {args.slowdown:g}x slower"
    )
    axes.legend()
    save_figure(figure, path)


if __name__ == "__main__":
    sys.exit(main())
