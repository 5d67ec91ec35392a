"""Tables of the measured benchmarks (scale, fleet, churn), generated from their committed results.

Run by hand after adding a result under ``benchmarks/results/measured/``::

    python benchmarks/measured_tables.py benchmarks/PERFORMANCE.md benchmarks/RESULTS.md

rewrites each block from a line ``<!-- measured from benchmarks/results/measured/FILE -->`` to
``<!-- end measured -->`` with the table of FILE (its ``benchmark`` field says which: ``scale``,
``fleet`` or ``churn``), and nothing else. ``--check`` changes nothing and exits 1 when a file would
change (``tests/test_measured_tables.py`` runs it on both files).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^<!-- measured from (benchmarks/results/measured/[\w.-]+\.json) -->$")
END = "<!-- end measured -->"
SCALE_TARGETS = {"memory-gib": 6.0, "ratio": 1.5}
"""Issue 15's targets at 10,000 nodes: summed PSS, and time per update against 100 nodes."""


class BlockError(ValueError):
    """A block that cannot be generated (the message names the file and line)."""


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def scale_table(result: dict) -> str:
    """One row per run, then each strategy's 10,000-to-100-node ratios against the targets."""
    runs = sorted(result["runs"], key=lambda r: (r["strategy"], r["nodes"]))
    lines = [
        f"Commit {result['commit']}; {result['versions']}; `--updates {runs[0]['updates-asked']} "
        f"--actors {runs[0]['actors']}`; load average (1 min) at each run's start and end.",
        "",
        "| strategy | nodes | updates | peak PSS GiB | of which Ray actors | first update s "
        "| median gap ms | mean gap ms | wall s | final acc. | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        actors = r["groups-at-peak-gib"].get("Ray actors")
        accuracy = r.get("final-accuracy")
        lines.append(
            f"| {r['strategy']} | {r['nodes']:,} | {r['updates']:,} | {r['peak-pss-gib']:.2f} | "
            f"{'' if actors is None else f'{actors:.2f}'} | {r['first-update-wall']:.1f} | "
            f"{_ms(r['median-gap'])} | {_ms(r['mean-gap'])} | {r['wall-seconds']:.0f} | "
            f"{'n/a' if accuracy is None else f'{accuracy:.3f}'} | "
            f"{r['load'][0]:.1f} to {r['load'][1]:.1f} |"
        )
    lines += [
        "",
        f"| strategy | peak PSS at 10,000 (target ≤ {SCALE_TARGETS['memory-gib']:g} GiB) | "
        f"median gap 10,000 / 100 | mean gap 10,000 / 100 | within "
        f"{SCALE_TARGETS['ratio']:g}x (median / mean) |",
        "|---|---|---|---|---|",
    ]
    by_key = {(r["strategy"], r["nodes"]): r for r in runs}
    for strategy in sorted({r["strategy"] for r in runs}):
        small, large = by_key.get((strategy, 100)), by_key.get((strategy, 10_000))
        if small is None or large is None:
            continue
        median = _ratio(large["median-gap"], small["median-gap"])
        mean = _ratio(large["mean-gap"], small["mean-gap"])
        memory_ok = large["peak-pss-gib"] <= SCALE_TARGETS["memory-gib"]
        within = "/".join(
            "n/a" if r is None else ("yes" if r <= SCALE_TARGETS["ratio"] else "no")
            for r in (median, mean)
        )
        lines.append(
            f"| {strategy} | {large['peak-pss-gib']:.2f} ({'met' if memory_ok else 'not met'}) | "
            f"{'n/a' if median is None else f'{median:.2f}x'} | "
            f"{'n/a' if mean is None else f'{mean:.2f}x'} | "
            f"{within} |"
        )
    return "\n".join(lines)


def fleet_table(result: dict) -> str:
    """One row per strategy: accuracy, updates, wall time and time to FedAvg's final accuracy."""
    verdict, runs = result["verdict"], result["runs"]
    target = verdict["target-accuracy"]
    lines = [
        f"| strategy | final acc. | best | updates | wall s | time to FedAvg's final "
        f"{target:.1%} (s) | fraction of FedAvg's wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    fedavg_wall = verdict["flwr-fedavg-wall-time"]
    for name in result["settings"]["strategies"]:
        run = runs[name]
        reached = verdict["time-to-target"].get(name)
        lines.append(
            f"| {name} | {run['final-accuracy']:.1%} | {run['best-accuracy']:.1%} | "
            f"{run['num-updates']} | {run['wall-time']:.0f} | "
            f"{'not reached' if reached is None else f'{reached:.0f}'} | "
            f"{'' if reached is None else f'{reached / fedavg_wall:.2f}'} |"
        )
    fraction = verdict["fraction-of-fedavg-wall-time"]
    lines += [
        "",
        f"Best asynchronous strategy: {verdict['best-async']}, at "
        f"{'n/a' if fraction is None else f'{fraction:.2f}'} of FedAvg's wall time "
        f"(target ≤ 0.5: {'met' if verdict['meets-half-of-fedavg'] else 'not met'}).",
    ]
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def churn_table(result: dict) -> str:
    """The churn run: its settings, what it applied and lost, each check, and memory growth."""
    s, run, memory = result["settings"], result["run"], result["memory-mib"]
    faults = ", ".join(f"{k} {v}" for k, v in sorted(run["faults"].items())) or "none"
    twice = "none" if not run["applied-twice"] else str(run["applied-twice"])
    lines = [
        f"`python benchmarks/churn.py --nodes {s['nodes']} --duration {s['duration']:g} "
        f"--kill-every {s['kill_every']:g} --down {s['down']:g} --timeout {s['timeout']:g} "
        f"--seed {s['seed']}` (ASGD, real clock): {result['kills']} SuperNodes killed with "
        f"SIGKILL and {result['restarts']} started again; PSS sampled every "
        f"{s['sample_every']:g} s.",
        "",
        "| stopped by | wall s | updates | faults | applied twice | nodes keyed by node id "
        "| final acc. |",
        "|---|---|---|---|---|---|---|",
        f"| {run['stopped-by']} | {run['wall-time']:.0f} | {run['num-updates']} | {faults} | "
        f"{twice} | {run['unidentified-nodes']} | {run['final-accuracy']:.1%} |",
        "",
        "| process | PSS max, first quarter (MiB) | PSS max, last quarter (MiB) | growth (MiB) "
        f"| within {s['memory_bound']:g} MiB |",
        "|---|---|---|---|---|",
    ]
    for name, key in (("ServerApp (`flwr-serverapp`)", "serverapp"), ("SuperLink", "superlink")):
        m = memory[key]
        lines.append(
            f"| {name} | {m['first-quarter-max']:.1f} | {m['last-quarter-max']:.1f} | "
            f"{m['growth']:+.1f} | {_yes(m['growth'] <= s['memory_bound'])} |"
        )
    checks = ", ".join(f"{name} {_yes(ok)}" for name, ok in result["checks"].items())
    return "\n".join([*lines, "", f"Checks: {checks}."])


RENDERERS = {"scale": scale_table, "fleet": fleet_table, "churn": churn_table}


def render(text: str, *, name: str = "<text>", root: Path | None = None) -> str:
    """``text`` with every measured block regenerated from the file it names (paths are taken
    from ``root``, the repository by default)."""
    root = ROOT if root is None else root
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        match = BEGIN.match(line.strip())
        i += 1
        if not match:
            continue
        where = f"{name}:{i}"
        try:
            end = lines.index(END, i)
        except ValueError:
            raise BlockError(f"{where}: block without '{END}'") from None
        path = root / match.group(1)
        if not path.is_file():
            raise BlockError(f"{where}: {match.group(1)} does not exist")
        result = json.loads(path.read_text(encoding="utf-8"))
        kind = result.get("benchmark")
        if kind not in RENDERERS:
            raise BlockError(
                f"{where}: {match.group(1)} has benchmark {kind!r}; tables exist for "
                f"{sorted(RENDERERS)}"
            )
        out += ["", RENDERERS[kind](result), "", END]
        i = end + 1
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="Markdown files to rewrite")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        try:
            new = render(text, name=str(path))
        except BlockError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(str(path))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale tables in {', '.join(stale)}: run without --check", file=sys.stderr)
        return 1
    print(("up to date: " if not stale else "rewrote: ") + ", ".join(stale or map(str, args.files)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
