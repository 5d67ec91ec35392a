"""Peak memory of a whole ``python -m fl_async.app`` run: the real ClientApp and its model.

Run by hand (not a test): ``python benchmarks/app_memory.py [--nodes 1000] [--updates 1200]``
starts the main command with ``--nodes`` virtual nodes on an IID split of the embedded MNIST (the
default CNN, one local epoch) and samples, every 0.5 s, the summed PSS and RSS of every process
under it (the launcher, the SuperLink, the ServerApp, Ray's services and actors, each with
torch). Unlike ``runtime.py``'s memory phase (a numpy model in numpy ClientApps), this is what a
user's simulation costs. Writes ``benchmarks/results/app-memory-<nodes>.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from process_usage import tree_memory

HERE = Path(__file__).resolve().parent


def sample(pid: int, peaks: dict, stop: threading.Event) -> None:
    """Keep the largest summed PSS / RSS of ``pid``'s tree (and its groups at the PSS peak)."""
    while not stop.is_set():
        now = tree_memory(pid)
        if now["pss"] > peaks["pss"]:
            peaks.update(pss=now["pss"], groups=now["groups"], processes=now["processes"])
        peaks["rss"] = max(peaks["rss"], now["rss"])
        stop.wait(0.5)


def run_sampled(command: list[str], stdout) -> tuple[int, dict]:
    """Run ``command`` (stdout and stderr to ``stdout``) while ``sample`` watches its process
    tree; its exit code and the peaks."""
    peaks = {"pss": 0, "rss": 0, "groups": {}, "processes": 0}
    with subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT) as run:
        stop = threading.Event()
        watcher = threading.Thread(target=sample, args=(run.pid, peaks, stop), daemon=True)
        watcher.start()
        code = run.wait()
        stop.set()
        watcher.join()
    return code, peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=1200)
    parser.add_argument("--strategy", default="gsgm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = (
            f"strategy='{args.strategy}' partition.scheme='iid' local-epochs=1 "
            f"max-updates={args.updates} num-rounds=100 output-dir='{tmp}'"
        )
        command = [
            sys.executable,
            "-m",
            "fl_async.app",
            "--app",
            str(HERE.parent),
            "--nodes",
            str(args.nodes),
            "--run-config",
            config,
        ]
        started = time.time()
        code, peaks = run_sampled(command, subprocess.DEVNULL)
        history = json.loads(Path(tmp, "history.json").read_text()) if code == 0 else {}
    result = {
        "nodes": args.nodes,
        "updates": history.get("num-updates"),
        "strategy": args.strategy,
        "exit-code": code,
        "wall-seconds": round(time.time() - started, 1),
        "peak-pss-gib": round(peaks["pss"] / 2**30, 3),
        "peak-rss-gib": round(peaks["rss"] / 2**30, 3),
        "processes-at-peak": peaks["processes"],
        "groups-at-peak-gib": {k: round(v["pss"] / 2**30, 3) for k, v in peaks["groups"].items()},
        "final-accuracy": history.get("final-accuracy"),
    }
    out = HERE / "results" / f"app-memory-{args.nodes}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
