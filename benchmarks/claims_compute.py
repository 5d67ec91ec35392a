"""The claims study's compute, estimated before it starts: hours per suite and its longest run.

Usage::

    python benchmarks/claims_compute.py --sweep RECORDS --s30 FOLDER --s100 FOLDER
        [--pace RESULT ...] [--label ..]

Each suite of the protocol (``SUITES``, in its order; those it cut, ``CUT``, are estimated too and
marked) is estimated from runs at 10 SSGD rounds made before it:
every run of the suite stands for one input run of the same split and seed (its ``runs``), whose
wall time scales by R / 10 (R: the suite's SSGD rounds), times ``SEEDS`` evaluation seeds, times
the suite's factor (1.5 where the inputs are development seeds of scenario (a): evaluation seeds
cost more there, the GSGM study found). An input run stopped by a wall-clock cap is extrapolated
to its budget (its wall time times budget over the virtual time it reached). Inputs: the sweep's
records (``--sweep``, its ``tuned.json`` naming each preset's chosen point), the GSGM study's
records (scenario (b) and the alpha splits; evaluation seeds, made before the update guard) and
Synthetic runs at 30 and 100 nodes (``--s30``, ``--s100``: suite or records folders). The launcher's
start (10 to 20 s a run) is not counted. Two runs at a time do ``TWO_AT_A_TIME`` times the work
an hour, or, for a suite of a scenario that a ``--pace`` result (``runs_at_a_time.py``) measured,
what that result measured. The result, with every input run's wall time, goes to
``benchmarks/results/measured/claims-compute-<time>-<commit>.json``; its table is generated into
RESULTS.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from measured import header, write
from tables.runs_at_a_time import pace

from fl_async.bench.cli import add_arguments
from fl_async.bench.export import read_records
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.records import Records
from fl_async.files import read_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITES_DIR = HERE / "results" / "suites"
SEEDS = 10
"""Evaluation seeds per suite."""
INPUT_ROUNDS = 10
"""SSGD rounds of every input run's budget."""
TWO_AT_A_TIME = 1.2
"""Work done two runs at a time against one at a time, where no ``--pace`` result measured it
(the first protocol's single measurement on this 2-core machine)."""
ASYNC = ("asgd", "gsgm", "trendsmooth", "fedasync", "fedbuff", "dcasgd", "odsgd", "asp")
ASYNC += ("mifa", "ca2fl", "fadas")
DEFAULTS = "defaults"
"""A suite's flag: it also runs, at its default (``<preset>-default``), each preset whose point
the sweep chose off its default (``tuned.json``)."""

# Each suite: its bench scenario, its inputs' source, split and factor, its R, and its runs
# (name -> input run name, where "tuned:P" is preset P's point chosen by the sweep and
# "default:P" P's default point).
_SWEEP_RUNS = {
    **{preset: f"tuned:{preset}" for preset in ("ssgd", *ASYNC)},
    "ssp": "tuned:asgd",  # ASGD paced by SSP: at most ASGD's updates
}
SUITES: dict[str, dict[str, Any]] = {
    "claims-a-dir": {
        "scenario": "a",
        "source": "sweep",
        "split": "dirichlet",
        "rounds": 30,
        "factor": 1.5,
        "runs": _SWEEP_RUNS,
        DEFAULTS: True,
    },
    **{
        f"claims-alpha{a}": {
            "scenario": "a",
            "source": f"gsgm-eval-alpha{a}",
            "split": "dirichlet",
            "rounds": 30,
            "factor": 1.0,
            "runs": {p: p for p in ("ssgd", "asgd", "gsgm")},
        }
        for a in ("0.05", "0.5", "1.0")
    },
    "claims-s30": {
        "scenario": "s",
        "source": "s30",
        "split": "natural",
        "rounds": 40,
        "factor": 1.0,
        "runs": {"ssgd": "ssgd", **{p: "asgd" for p in (*ASYNC, "ssp")}},
    },
    "claims-a-ls": {
        "scenario": "a",
        "source": "sweep",
        "split": "label-skew",
        "rounds": 50,
        "factor": 1.5,
        "runs": _SWEEP_RUNS,
    },
    "claims-b": {
        "scenario": "b",
        "source": "gsgm-eval-b",
        "split": "dirichlet",
        "rounds": 30,
        "factor": 1.0,
        "runs": {p: p for p in ("ssgd", "gsgm", "asgd")},
    },
    "claims-s100": {
        "scenario": "s",
        "source": "s100",
        "split": "natural",
        "rounds": 50,
        "factor": 1.0,
        "runs": {"ssgd": "ssgd", **{p: "asgd" for p in ("fedbuff", "fedasync", "fadas")}},
    },
}
CUT = ("claims-a-ls", "claims-b", "claims-s100")
"""The suites the amended protocol cut before any run (estimated, not run)."""


def wall_seconds(record: Mapping[str, Any]) -> float:
    """The run's wall time, extrapolated to its budget when a wall-clock cap stopped it."""
    summary = record["summary"]
    wall = float(summary["wall-time"])
    if summary.get("stopped-by") == "max-wall-time":
        wall *= float(record["grid"]["budget"]) / float(summary["virtual-time"])
    return wall


def input_name(wanted: str, tuned: Mapping[str, Any]) -> str:
    """The input run's name: preset P's chosen point (``tuned:P``) or default (``default:P``)."""
    kind, _, preset = wanted.partition(":")
    if kind == "tuned":
        return tuned["chosen"][preset]["name"]
    return preset if kind == "default" else wanted


def off_default(tuned: Mapping[str, Any]) -> list[str]:
    """The presets whose point the sweep chose off their default (a variant's name)."""
    return sorted(p for p, point in tuned["chosen"].items() if point["name"] != p)


def suite_estimate(plan: Mapping[str, Any], records: Records, tuned: Mapping) -> dict[str, Any]:
    """One suite's inputs (wall s by run and seed), wall s per seed, hours and longest run."""
    runs = dict(plan["runs"])
    if plan.get(DEFAULTS):
        runs.update({f"{p}-default": f"default:{p}" for p in off_default(tuned)})
    names = {run: input_name(wanted, tuned) for run, wanted in runs.items()}
    missing = sorted({n for n in names.values() if n not in records})
    if missing:
        raise SystemExit(f"{plan['source']}/{plan['split']}: no input runs {', '.join(missing)}")
    seeds = sorted(set.intersection(*(set(records[n]) for n in names.values())))
    walls = {n: {str(s): wall_seconds(records[n][s]) for s in seeds} for n in set(names.values())}
    per_seed = [sum(walls[n][str(s)] for n in names.values()) for s in seeds]
    scale = plan["rounds"] / INPUT_ROUNDS * plan["factor"]
    longest_name, longest_seed = max(
        ((n, s) for n in walls for s in walls[n]), key=lambda ns: walls[ns[0]][ns[1]]
    )
    mean = sum(per_seed) / len(per_seed)
    return {
        **{key: plan[key] for key in ("scenario", "source", "split", "rounds", "factor")},
        "runs": names,
        "input-seeds": seeds,
        "inputs": walls,
        "wall-per-seed": mean,
        "hours": mean * scale * SEEDS / 3600,
        "longest": {
            "run": longest_name,
            "seed": int(longest_seed),
            "hours": walls[longest_name][longest_seed] * scale / 3600,
        },
    }


def _shown(folder: Path) -> str:
    """The folder as the result names it: from the repository's root, else by its own name."""
    full = folder.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else full.name


def _scenario(args: list[str]) -> str:
    """The scenario ``fl-async bench`` ran with these arguments, read by its own parser (its
    default, and every spelling it accepts)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(args).scenario


def read_paces(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Two runs at a time's work an hour by scenario, from runs-at-a-time results (each holds
    the bench arguments it ran, which name its scenario)."""
    paces: dict[str, dict[str, Any]] = {}
    for path in paths:
        result = read_json(path, "runs-at-a-time result", keys=("jobs", "passes", "bench-args"))
        if not {1, 2} <= set(result["jobs"]):
            raise SystemExit(f"--pace {path}: measures --jobs {result['jobs']}; needs 1 and 2")
        scenario = _scenario(result["bench-args"])
        found = pace(result)
        paces[scenario] = {"pace": round(found[2] / found[1], 3), "pace-from": path.name}
    return paces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", type=Path, required=True, help="the sweep's records folder")
    parser.add_argument("--s30", type=Path, required=True, help="Synthetic runs, 30 nodes")
    parser.add_argument("--s100", type=Path, required=True, help="Synthetic runs, 100 nodes")
    pace_help = "runs_at_a_time.py results: two at a time's pace by scenario"
    parser.add_argument("--pace", type=Path, nargs="*", default=[], help=pace_help)
    parser.add_argument("--label", default="", help="a note for the table's caption")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    args = parser.parse_args()
    folders = {"sweep": args.sweep, "s30": args.s30, "s100": args.s100}
    tuned = read_json(args.sweep / "tuned.json", "sweep choice", keys=("chosen",))
    paces = read_paces(args.pace)
    result = {**header("claims-compute"), "label": args.label, "seeds": SEEDS}
    result.update({"two-at-a-time": TWO_AT_A_TIME, "suites": []})  # a list: the protocol's order
    loaded: dict[str, dict[str, Records]] = {}
    for name, plan in SUITES.items():
        source = plan["source"]
        folder = folders.get(source, SUITES_DIR / source)
        if source not in loaded:
            loaded[source] = read_records(folder, DEFAULT_GRID)
        split = loaded[source].get(plan["split"], {})
        estimate = suite_estimate(plan, split, tuned)
        shown = {"name": name, "folder": _shown(folder), "cut": name in CUT}
        result["suites"].append({**shown, **estimate, **paces.get(plan["scenario"], {})})
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    write(result, args.out / f"claims-compute-{stamp}-{result['commit']}.json")


if __name__ == "__main__":
    main()
