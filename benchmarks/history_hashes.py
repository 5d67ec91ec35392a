"""Fingerprints of every preset's seeded history through ``python -m fl_async.app``.

Run by hand before and after a change that must not move a single result (a refactor):
``python benchmarks/history_hashes.py [--app DIR] [--out FILE]`` runs each preset once on the
embedded MNIST with the virtual clock and a short budget (6 nodes, 12 updates, one local epoch;
about 40 s a preset on 2 cores) and prints one SHA-256 per preset over everything the run
recorded except wall times and Flower's node ids (drawn at random for every simulated run; the
seeded stable ids stay): every update record, every central evaluation (its accuracy and
loss fix the final model), the final counts, faults and rejections. Two runs of the same code
print the same hashes; a refactor that changes nothing prints them too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PRESETS = [
    *("asgd", "asp", "ca2fl", "dcasgd", "fadas", "fedasync", "fedbuff", "gsgm", "mifa", "odsgd"),
    *("fedcompass", "ssgd", "trendsmooth"),
]
RUN_CONFIG = "num-rounds=2 max-updates=12 local-epochs=1 eval-every=4 seed=0"
UNSEEDED = ("wall-time", "node-id")
KEPT = (
    "updates",
    "evaluations",
    "num-updates",
    "server-steps",
    "virtual-time",
    "stopped-by",
    "faults",
    "rejected",
    "final-accuracy",
    "final-loss",
)


def fingerprint(history: dict) -> str:
    """SHA-256 of the history's seeded content (wall times and random node ids left out)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in UNSEEDED}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    kept = {key: strip(history[key]) for key in KEPT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def run(preset: str, app: Path, output: Path) -> dict:
    """One seeded run of ``preset``; its history."""
    config = f"strategy='{preset}' {RUN_CONFIG} output-dir='{output}'"
    command = [
        sys.executable,
        "-m",
        "fl_async.app",
        "--app",
        str(app),
        "--nodes",
        "6",
        "--run-config",
        config,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{preset}: exit {done.returncode}\n{done.stdout[-3000:]}")
    return json.loads((output / "history.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--out", type=Path, help="also write {preset: hash} as JSON here")
    parser.add_argument("--presets", nargs="*", default=PRESETS)
    args = parser.parse_args()
    hashes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            history = run(preset, args.app.resolve(), Path(tmp, preset))
            hashes[preset] = fingerprint(history)
            print(
                f"{preset:12s} {hashes[preset]}  final accuracy {history['final-accuracy']}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(hashes, indent=1) + "\n")


if __name__ == "__main__":
    main()
