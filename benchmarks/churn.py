"""Churn held for a quarter of an hour: SuperNodes killed and restarted under a running strategy.

Starts a SuperLink and ``--nodes`` SuperNodes on 127.0.0.1 (free ports), runs the fl-async app
(``flwr run <repo> <connection> --stream``, ``clock.type = 'real'``) for ``--duration`` seconds
of wall time, and meanwhile follows a seeded schedule: about every ``--kill-every`` seconds one
SuperNode (drawn from the seed) is killed with SIGKILL, by PID, with everything it started, and
started again ``--down`` seconds later (same partition, a new Flower node id). Every
``--sample-every`` seconds it samples the proportional set size (PSS, ``/proc/<pid>/smaps_rollup``)
of the ServerApp process (``flwr-serverapp``) and of the SuperLink.

The strategy is ASGD. It checks, from the run's ``history.json``: the run stopped by its budget
(``max-wall-time``) after applying updates; no update was applied twice (ASGD takes one server
step per accepted update: each step is taken once, and no node has two accepted updates on one
base version, ``applied_twice``); and neither process's memory grew by more than
``--memory-bound`` MiB from the first quarter of the run (its maximum) to the last quarter.
Writes a compact JSON result (``benchmarks/results/measured/churn-<time>.json`` by default)
and exits 1 when a check failed.

Every process is stopped by PID at the end, on failure or SIGTERM too; every wait is bounded
(``--run-timeout``). ``python benchmarks/churn.py`` is the 15-minute run with six SuperNodes.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the deployment helpers the deployment tests use

from flower_deployment import FlowerDeployment  # noqa: E402
from flower_processes import FlowerProcess, FlowerProcessError  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "measured"
MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every check passed."""
    args = _parser().parse_args(argv)
    _check_args(args)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or RESULTS / f"churn-{stamp}.json").resolve()
    workdir = Path(args.workdir or ROOT / "benchmarks" / "results" / f"churn-{stamp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # __exit__ stops every process
    plan = schedule(
        seed=args.seed,
        nodes=args.nodes,
        duration=args.duration,
        every=args.kill_every,
        down=args.down,
    )
    with FlowerDeployment(workdir / "flower", startup_timeout=args.startup_timeout) as fleet:
        fleet.start_superlink()
        for k in range(args.nodes):
            fleet.start_supernode(k, args.nodes)
        fleet.wait_for_nodes(args.nodes, timeout=args.startup_timeout)
        print(f"churn: SuperLink {fleet.address}, {args.nodes} SuperNodes, {len(plan)} kills")
        proc = fleet.start_run(ROOT, _run_config(args, workdir / "run"))
        done, samples, events = _follow(fleet, proc, plan, args)
    left = fleet.leftovers()
    history = _history(workdir / "run", fleet, done)
    result = _result(args, history, samples, events, left)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["checks"], indent=1))
    print(f"wrote {out}; logs in {workdir}")
    return 0 if all(result["checks"].values()) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--nodes", type=int, default=6, help="SuperNodes (default 6)")
    add("--duration", type=float, default=900.0, help="the run's wall budget, s (default 900)")
    add("--kill-every", type=float, default=60.0, help="mean s between kills (default 60)")
    add("--down", type=float, default=15.0, help="s a killed SuperNode stays down (default 15)")
    add("--timeout", type=float, default=120.0, help="each task's timeout, s (default 120)")
    add("--seed", type=int, default=0, help="seeds the schedule and the run (default 0)")
    add("--sample-every", type=float, default=5.0, help="s between memory samples (default 5)")
    add("--memory-bound", type=float, default=64.0, help="allowed growth, MiB (default 64)")
    add("--run-config", default="", help="more run-config overrides, as for flwr run")
    add("--run-timeout", type=float, default=0.0, help="longest wait, s (default duration+300)")
    add("--startup-timeout", type=float, default=120.0, help="longest wait for the fleet, s")
    add("--out", default="", help="result JSON (default results/measured/churn-<time>.json)")
    add("--workdir", default="", help="logs and the run's outputs (default results/churn-<time>)")
    return parser


def _check_args(args: argparse.Namespace) -> None:
    for name in ("nodes", "duration", "kill_every", "sample_every"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if not 0 < args.down < args.kill_every:
        raise SystemExit(f"--down must lie in (0, --kill-every), got {args.down}")
    args.run_timeout = args.run_timeout or args.duration + 300.0


def schedule(
    *, seed: int, nodes: int, duration: float, every: float, down: float
) -> list[dict[str, float]]:
    """The seeded kills: ``at`` (s after the run started), ``partition`` and ``restart`` (s).

    Kill ``k`` falls at ``k * every`` give or take a quarter of ``every``; none in the last
    ``every`` seconds, so that every killed node is back before the budget ends.
    """
    rng = np.random.default_rng(seed)
    plan = []
    for k in range(1, int(duration // every)):
        at = k * every + float(rng.uniform(-every / 4, every / 4))
        plan.append(
            {
                "at": round(at, 1),
                "partition": int(rng.integers(nodes)),
                "restart": round(at + float(rng.uniform(down / 2, down * 1.5)), 1),
            }
        )
    return plan


def _run_config(args: argparse.Namespace, output: Path) -> dict[str, object]:
    from flwr.common.config import parse_config_args

    config: dict[str, object] = {
        "strategy": "asgd",  # one server step per accepted update: see applied_twice
        "clock.type": "real",
        "num-nodes": args.nodes,
        "seed": args.seed,
        "local-epochs": 0,
        "local-steps": 10,  # short tasks: many updates, many tasks cut by a kill
        "threads": 1,
        "timeout": args.timeout,
        "num-rounds": 100_000,  # the wall budget binds
        "max-wall-time": args.duration,
        "eval-every": 50,
        "output-dir": str(output),
    }
    if args.run_config:
        config.update(dict(parse_config_args([args.run_config])))
    return config


def _follow(
    fleet: FlowerDeployment, run: FlowerProcess, plan: list[dict[str, float]], args: Any
) -> tuple[bool, list[list[float]], list[dict[str, Any]]]:
    """Run the schedule and sample memory until ``flwr run`` exits (at most ``run_timeout``);
    whether it exited, the samples ``[t, ServerApp MiB, SuperLink MiB]`` and what was done."""
    start = time.monotonic()
    pending = sorted(
        [(p["at"], "kill", p["partition"]) for p in plan]
        + [(p["restart"], "restart", p["partition"]) for p in plan]
    )
    samples: list[list[float]] = []
    events: list[dict[str, Any]] = []
    next_sample = 0.0
    while run.running() and (now := time.monotonic() - start) < args.run_timeout:
        while pending and pending[0][0] <= now:
            _, action, partition = pending.pop(0)
            events.append(_act(fleet, action, int(partition), args.nodes, now))
        if now >= next_sample:
            next_sample = now + args.sample_every
            server, link = _serverapp(fleet), fleet.superlink
            samples.append([round(now, 1), _pss_mib(server), _pss_mib(link and link.pid)])
        time.sleep(0.5)
    if run.running():
        run.stop()
        return False, samples, events
    return True, samples, events


def _act(fleet: FlowerDeployment, action: str, partition: int, nodes: int, now: float) -> dict:
    if action == "kill":
        fleet.kill_supernode(partition)
    elif not fleet.supernodes[partition].running():  # a later kill may have restarted it
        fleet.start_supernode(partition, nodes)
    print(f"churn: +{now:6.1f} s {action} SuperNode {partition}", flush=True)
    return {"t": round(now, 1), "action": action, "partition": partition}


def _serverapp(fleet: FlowerDeployment) -> int | None:
    """The PID of the ``flwr-serverapp`` process the SuperLink started, if it runs."""
    if fleet.superlink is None:
        return None
    for pid, _ in fleet.superlink.members():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"flwr-serverapp" in cmdline:
            return pid
    return None


def _pss_mib(pid: int | None) -> float | None:
    """The proportional set size of ``pid`` in MiB (None when it is gone or not readable)."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) * 1024 / MIB, 1)
    return None


def _history(output: Path, fleet: FlowerDeployment, done: bool) -> dict[str, Any]:
    path = output / "history.json"
    if not done or not path.is_file():
        raise FlowerProcessError(
            f"the run {'exited' if done else 'timed out'} without {path}:\n{fleet.logs()}"
        )
    return json.loads(path.read_text())


def memory_growth(samples: list[list[float]], column: int) -> dict[str, float | None]:
    """The maximum of ``column`` over the first and the last quarter of the samples (where the
    process was seen) and the growth between them, in MiB."""
    seen = [s for s in samples if s[column] is not None]
    if len(seen) < 4:
        return {"first-quarter-max": None, "last-quarter-max": None, "growth": None}
    quarter = len(seen) // 4
    first = max(s[column] for s in seen[:quarter])
    last = max(s[column] for s in seen[-quarter:])
    return {
        "first-quarter-max": first,
        "last-quarter-max": last,
        "growth": round(last - first, 1),
        "max": max(s[column] for s in seen),
    }


def applied_twice(updates: list[dict[str, Any]]) -> list[list[int]]:
    """``[node-id, base version]`` of every task whose update was accepted more than once.

    ASGD takes one server step per accepted update, so a node (one Flower node id: a restarted
    SuperNode gets a new one) never has two accepted tasks on the same base version: its next
    task starts from the step its last update made. The base version is the step before the
    update's (``server-step - 1``) less its staleness.
    """
    seen: dict[tuple[int, int], int] = {}
    for update in updates:
        if update.get("accepted"):
            base = int(update["server-step"]) - 1 - int(update["staleness"])
            key = (int(update["node-id"]), base)
            seen[key] = seen.get(key, 0) + 1
    return [list(key) for key, count in sorted(seen.items()) if count > 1]


def _steps_once(updates: list[dict[str, Any]]) -> bool:
    """Whether the accepted updates took server steps 1, 2, ... each once, in order."""
    steps = [int(u["server-step"]) for u in updates if u.get("accepted")]
    return steps == list(range(1, len(steps) + 1))


def _by_partition(updates: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for update in updates:
        if update.get("accepted"):
            key = str(update["stable-id"])
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def _result(
    args: argparse.Namespace,
    history: dict[str, Any],
    samples: list[list[float]],
    events: list[dict[str, Any]],
    left: list[int],
) -> dict[str, Any]:
    server, link = memory_growth(samples, 1), memory_growth(samples, 2)
    twice = applied_twice(history["updates"])
    kills = sum(e["action"] == "kill" for e in events)
    within = [m["growth"] is not None and m["growth"] <= args.memory_bound for m in (server, link)]
    return {
        "benchmark": "churn",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
        "checks": {
            "reached-budget": history["stopped-by"] == "max-wall-time",
            # A run that applied next to nothing under churn would prove nothing.
            "updates-applied": history["num-updates"] >= max(1, kills),
            "no-update-applied-twice": not twice and _steps_once(history["updates"]),
            "serverapp-memory-within-bound": within[0],
            "superlink-memory-within-bound": within[1],
            "no-process-left": not left,
        },
        "run": {
            "stopped-by": history["stopped-by"],
            "wall-time": round(history["wall-time"], 1),
            "num-updates": history["num-updates"],
            "replies": len(history["updates"]),
            "final-accuracy": history["final-accuracy"],
            "faults": history["faults"],
            "rejected": history["rejected"],
            "applied-twice": twice,
            "accepted-by-stable-id": _by_partition(history["updates"]),
            "unidentified-nodes": len(
                {u["stable-id"] for u in history["updates"] if u["stable-id"] >= args.nodes}
            ),
        },
        "kills": kills,
        "restarts": sum(e["action"] == "restart" for e in events),
        "events": events,
        "memory-mib": {"serverapp": server, "superlink": link},
        "memory-samples": samples[:: max(1, len(samples) // 60)],  # [t, ServerApp, SuperLink]
        "processes-left-after-stop": left,
    }


if __name__ == "__main__":
    sys.exit(main())
