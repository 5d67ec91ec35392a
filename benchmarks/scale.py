"""Many virtual nodes on one machine: peak memory and the server's time per update of one run.

Run by hand (not a test)::

    nice -n 15 python benchmarks/scale.py --strategy gsgm --nodes 10000 --updates 20000 \
        [--max-in-flight 0] [--actors 2] [--seed 0]

starts ``python -m fl_async.app`` on the Synthetic dataset (``dataset='synthetic'``:
Synthetic(1, 1), one generated device per node, logistic regression, one local epoch) with
``--nodes`` virtual nodes and a budget of ``--updates`` accepted updates, and measures:

- **peak memory**: the largest summed PSS (shared pages split between their sharers) of the
  launcher and every process under it (SuperLink, SuperExec, ServerApp, simulation, Ray's GCS,
  raylet and ClientApp actors), sampled every 0.5 s by ``app_memory.sample``;
- **time per update** (from the run's ``history.json``, the ``wall-time`` of each accepted
  update, seconds since the strategy's loop started): the mean gap between consecutive accepted
  updates over the steady part of the run (from the update at 10 % of the budget to the last),
  and its median; start-up (the app's launch, data checks, Ray, identifying the nodes, the first
  dispatch to every node) is excluded and reported apart as ``first-update-wall``. With a virtual
  clock this is the loop's throughput: the ServerApp's own work per update plus whatever it
  waits for the Ray actors (``--actors``) to train, so compare runs with the same actors.

Writes ``benchmarks/results/scale-<strategy>-<nodes>.json`` (with the commit, the versions and
the load average at the start and end) and prints one line. To commit a set of runs::

    python benchmarks/scale.py --bundle benchmarks/results/measured/scale-<date>.json \
        benchmarks/results/scale-*.json

writes them as one compact result (no log tails) that ``benchmarks/blocks.py`` turns
into the tables of PERFORMANCE.md and RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from app_memory import run_sampled

HERE = Path(__file__).resolve().parent
STEADY_FROM = 0.1
"""Gaps between updates are measured from the update at this fraction of the budget."""


def update_times(history: dict, steady_from: float = STEADY_FROM) -> dict[str, float | None]:
    """Start-up and time per accepted update (s) from a ``history.json``'s update records,
    the steady part starting at the update at ``steady_from`` of them."""
    walls = [float(u["wall-time"]) for u in history.get("updates", []) if u.get("accepted")]
    if len(walls) < 3:
        return {
            "first-update-wall": walls[0] if walls else None,
            "mean-gap": None,
            "median-gap": None,
        }
    steady = walls[int(steady_from * len(walls)) :]
    gaps = [b - a for a, b in zip(steady, steady[1:], strict=False)]
    return {
        "first-update-wall": round(walls[0], 3),
        "steady-updates": len(steady),
        "mean-gap": (steady[-1] - steady[0]) / (len(steady) - 1),
        "median-gap": statistics.median(gaps),
    }


def provenance() -> dict[str, str]:
    """The commit of the code measured and the versions of what it ran on."""
    # FL_ASYNC_COMMIT names the commit of a tree copied to another machine, where git would
    # answer for whatever .git it finds there (or for none).
    commit = os.environ.get("FL_ASYNC_COMMIT")
    if not commit:
        try:
            commit = git_commit(HERE)
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("flwr", "torch", "numpy"))
    return {"commit": commit, "versions": versions}


def git_commit(checkout: Path) -> str:
    """The short commit of ``checkout``'s HEAD; ``CalledProcessError`` outside a git checkout."""
    git = ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()


def bundle(out: Path, files: list[Path]) -> None:
    """Write the runs in ``files`` as one result for ``benchmarks/blocks.py``."""
    runs = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    if not runs:
        raise SystemExit("--bundle needs at least one scale-<strategy>-<nodes>.json")
    origins = {(r.get("commit"), r.get("versions")) for r in runs}
    if len(origins) != 1 or None in next(iter(origins)):
        raise SystemExit(f"--bundle needs runs of one commit and versions, recorded; got {origins}")
    commit, versions = origins.pop()
    keep = [
        {k: v for k, v in r.items() if k not in ("log-tail", "commit", "versions")} for r in runs
    ]
    result = {"benchmark": "scale", "commit": commit, "versions": versions, "runs": keep}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(keep)} runs -> {out}")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the app as ``args`` say while sampling its memory; the result (with the log's last
    lines when the run failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = (
            f"strategy='{args.strategy}' dataset='synthetic' local-epochs=1 "
            f"max-updates={args.updates} num-rounds={args.updates} "
            f"max-in-flight={args.max_in_flight} seed={args.seed} "
            f"timeout={args.timeout} output-dir='{tmp}'"
        )
        command = [sys.executable, "-m", "fl_async.app", "--app", str(HERE.parent)]
        command += ["--nodes", str(args.nodes), "--run-config", config]
        if args.actors is not None:
            command += ["--actors", str(args.actors)]
        started, load_start = time.time(), os.getloadavg()[0]
        log = Path(tmp, "run.log")
        with log.open("wb") as out:
            code, peaks = run_sampled(command, out)
        path = Path(tmp, "history.json")
        history = json.loads(path.read_text()) if path.exists() else {}
        tail = log.read_text(errors="replace").splitlines()[-15:] if code else []
    times = update_times(history)
    return {
        "strategy": args.strategy,
        "nodes": args.nodes,
        "updates-asked": args.updates,
        "updates": history.get("num-updates"),
        "max-in-flight": args.max_in_flight,
        "actors": args.actors,
        "seed": args.seed,
        "exit-code": code,
        "wall-seconds": round(time.time() - started, 1),
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        **provenance(),
        "peak-pss-gib": round(peaks["pss"] / 2**30, 3),
        "peak-rss-gib": round(peaks["rss"] / 2**30, 3),
        "processes-at-peak": peaks["processes"],
        "groups-at-peak-gib": {k: round(v["pss"] / 2**30, 3) for k, v in peaks["groups"].items()},
        **{k: round(v, 5) if isinstance(v, float) else v for k, v in times.items()},
        "final-accuracy": history.get("final-accuracy"),
        "log-tail": tail,
    }


def main() -> None:
    """Measure one run and write its result; with ``--bundle``, bundle results for the tables."""
    if sys.argv[1:2] == ["--bundle"]:
        if len(sys.argv) < 4:
            raise SystemExit("usage: scale.py --bundle OUT.json RUN.json [RUN.json ...]")
        bundle(Path(sys.argv[2]), [Path(f) for f in sys.argv[3:]])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="gsgm", help="e.g. gsgm, asgd, fedbuff")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=0,
        help="tasks in flight at once (0: the app's default)",
    )
    parser.add_argument(
        "--actors",
        type=int,
        default=None,
        help="Ray ClientApp actors (default: the number of CPUs)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="each task's TTL (s)")
    args = parser.parse_args()
    result = measure(args)
    out = HERE / "results" / f"scale-{args.strategy}-{args.nodes}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    mean, median = (_ms(result[k]) for k in ("mean-gap", "median-gap"))
    print(
        f"{args.strategy} nodes={args.nodes} updates={result['updates']} "
        f"exit={result['exit-code']} peak-pss={result['peak-pss-gib']} GiB time/update={mean} "
        f"(median {median}, first update at {result['first-update-wall']} s) "
        f"wall={result['wall-seconds']} s -> {out}"
    )


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
