"""The measured benchmarks' tables are generated from their committed results, and PERFORMANCE.md
states no figure outside them."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "benchmarks" / "results" / "measured"
PERFORMANCE = ROOT / "benchmarks" / "PERFORMANCE.md"
DOCS = [PERFORMANCE, ROOT / "benchmarks" / "RESULTS.md"]
NOT_PROSE = re.compile(
    r"<!-- measured from .*?<!-- end measured -->"  # generated blocks
    r"|^[ \t]*```.*?^[ \t]*```"  # fenced code: commands and their options
    r"|`[^`]*`"  # inline code: options, file names, constants
    r"|\]\([^)]*\)"  # link targets
    r"|<!--.*?-->",
    re.S | re.M,
)
ALLOWED = re.compile(
    r"\bissues?\s+\d+(?:(?:,\s*|\s+and\s+)\d+)*"  # issue numbers
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"  # commit hashes
    r"|\b\d{4}-\d{2}-\d{2}\b"  # dates
    r"|\b\d+(?:-core\b|\s+cores\b)"  # the machine's cores
    r"|\b(?:flwr|Python|numpy|torch|ray)\s+\d+(?:\.\d+)+"  # versions
)
"""Numbers that are no measured figure. Any other digit in prose is one: it belongs in a
generated block, or (an option's value, a constant) in code."""


def load_module():
    """``benchmarks/blocks.py``, the one mechanism of the generated blocks, loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "measured_tables", ROOT / "benchmarks" / "blocks.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tables = load_module()


def figures_outside_blocks(text: str) -> list[str]:
    """Each line of ``text`` with a digit outside generated blocks, code, link targets and the
    numbers ``ALLOWED``, as ``"line N: text"``."""

    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group())

    prose = ALLOWED.sub(blank, NOT_PROSE.sub(blank, text))
    lines = text.split("\n")
    return [
        f"line {i + 1}: {lines[i]}"
        for i, line in enumerate(prose.split("\n"))
        if re.search(r"\d", line)
    ]


def test_performance_states_no_figure_outside_a_generated_block() -> None:
    found = figures_outside_blocks(PERFORMANCE.read_text(encoding="utf-8"))
    assert not found, "figures outside generated blocks:\n" + "\n".join(found)


def test_the_figure_check_finds_figures_and_passes_what_is_none() -> None:
    text = "\n".join(
        [
            "# Speed (issues 2, 4 and 15), 2-core machine, flwr 1.42, 2026-11-24, commit 5bc60b4",
            "Run `--nodes 10000 --updates 20000`; see [the runs](#runs-2026-11-24).",
            "<!-- measured from benchmarks/results/measured/x.json -->",
            "| ASGD | 1.65 |",
            "<!-- end measured -->",
            "```bash",
            "python benchmarks/scale.py --nodes 100",
            "```",
            "| ASGD | 1.8 |",
            "ASGD took 3.5 ms per update in 2 runs.",
        ]
    )
    assert figures_outside_blocks(text) == [
        "line 9: | ASGD | 1.8 |",
        "line 10: ASGD took 3.5 ms per update in 2 runs.",
    ]


def test_a_new_benchmark_kind_is_one_module(tmp_path) -> None:
    folder = tmp_path / "tables"
    shutil.copytree(
        ROOT / "benchmarks" / "tables", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    (folder / "odd.py").write_text(
        'BENCHMARK = "odd"\n\n\ndef table(result: dict) -> str:\n    return "odd table"\n'
    )
    found = tables.load_renderers(folder, package="tables_under_test")
    assert set(found) == set(tables.RENDERERS) | {"odd"}
    assert found["odd"]({}) == "odd table"


def test_every_committed_result_has_a_table_that_names_its_commit() -> None:
    for path in sorted(MEASURED.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        made = tables.RENDERERS[result["benchmark"]](result)
        assert "commit" not in result or result["commit"] in made, path.name


def test_the_docs_tables_are_what_the_committed_results_give() -> None:
    shown = set()
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert tables.render(text, name=str(path)) == text, (
            f"{path} is out of date: python benchmarks/measured_tables.py {path}"
        )
        shown |= {
            m.group(1) for line in text.split("\n") if (m := tables.BEGIN.match(line.strip()))
        }
    committed = {f"benchmarks/results/measured/{p.name}" for p in MEASURED.glob("*.json")}
    assert committed <= shown, f"results no table shows: {sorted(committed - shown)}"


def scale_run(strategy: str, nodes: int, median: float, mean: float, pss: float) -> dict:
    return {
        "strategy": strategy,
        "nodes": nodes,
        "updates-asked": 20000,
        "updates": 20000,
        "actors": 2,
        "peak-pss-gib": pss,
        "groups-at-peak-gib": {"Ray actors": 1.1},
        "first-update-wall": 12.0,
        "median-gap": median,
        "mean-gap": mean,
        "wall-seconds": 100.0,
        "final-accuracy": 0.5,
        "load": [1.0, 2.0],
    }


def test_a_scale_block_is_rewritten_with_rows_and_ratios_and_nothing_else(tmp_path) -> None:
    result = {
        "benchmark": "scale",
        "commit": "abc1234",
        "versions": "flwr 1.42.0",
        "runs": [
            scale_run("asgd", 100, 0.0002, 0.004, 2.7),
            scale_run("asgd", 10000, 0.0004, 0.005, 6.5),
        ],
    }
    folder = tmp_path / "benchmarks" / "results" / "measured"
    folder.mkdir(parents=True)
    (folder / "scale-x.json").write_text(json.dumps(result))
    text = "before\n<!-- measured from benchmarks/results/measured/scale-x.json -->\nold\n"
    text += "<!-- end measured -->\nafter"
    made = tables.render(text, root=tmp_path)
    assert made.startswith("before\n<!-- measured from")
    assert made.endswith("<!-- end measured -->\nafter")
    assert "old" not in made
    assert "| asgd | 10,000 | 20,000 | 6.50 | 1.10 | 12.0 | 0.40 | 5.00 | 100 | 0.500 |" in made
    assert "| asgd | 6.50 (not met) | 2.00x | 1.25x | no/yes |" in made
    assert tables.render(made, root=tmp_path) == made


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            "<!-- measured from benchmarks/results/measured/none.json -->\n<!-- end measured -->",
            "doc.md:1: benchmarks/results/measured/none.json does not exist",
        ),
        (
            "<!-- measured from benchmarks/results/measured/odd.json -->\n<!-- end measured -->",
            "doc.md:1: benchmarks/results/measured/odd.json has benchmark 'odd'; tables exist for",
        ),
        (
            "x\n<!-- measured from benchmarks/results/measured/odd.json -->\nno end",
            "doc.md:2: block without '<!-- end measured -->'",
        ),
    ],
)
def test_bad_blocks_name_the_line_and_what_is_wrong(tmp_path, block, message) -> None:
    folder = tmp_path / "benchmarks" / "results" / "measured"
    folder.mkdir(parents=True)
    (folder / "odd.json").write_text(json.dumps({"benchmark": "odd"}))
    with pytest.raises(tables.BlockError, match=message.replace("(", r"\(")):
        tables.render(block, name="doc.md", root=tmp_path)


def test_check_exits_1_when_stale_and_rewrites_otherwise(tmp_path, capsys) -> None:
    fleet = json.loads((MEASURED / "fleet-20261124-170758.json").read_text(encoding="utf-8"))
    folder = tmp_path / "benchmarks" / "results" / "measured"
    folder.mkdir(parents=True)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- measured from benchmarks/results/measured/fleet-20261124-170758.json -->"
        "\n<!-- end measured -->\n"
    )
    (folder / "fleet-20261124-170758.json").write_text(json.dumps(fleet))
    tables.ROOT, saved = tmp_path, tables.ROOT
    try:
        assert tables.main([str(doc), "--check"]) == 1
        assert tables.main([str(doc)]) == 0
        assert tables.main([str(doc), "--check"]) == 0
    finally:
        tables.ROOT = saved
    text = doc.read_text()
    assert "| asgd | 96.1% | 96.6% | 200 | 793 | 407 | 0.54 |" in text
    best = "Best asynchronous strategy: asgd, at 0.54 of FedAvg's wall time (target ≤ 0.5: not met)"
    assert best in text


def test_scale_bundle_keeps_the_runs_without_logs_and_needs_one_commit(tmp_path) -> None:

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("scale", ROOT / "benchmarks" / "scale.py")
        scale = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(scale)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    files = []
    for nodes in (100, 10000):
        run = {
            **scale_run("gsgm", nodes, 0.0002, 0.004, 2.7),
            "log-tail": ["x"],
            "commit": "abc1234",
            "versions": "flwr 1.42.0",
        }
        files.append(tmp_path / f"scale-gsgm-{nodes}.json")
        files[-1].write_text(json.dumps(run))
    out = tmp_path / "measured" / "scale.json"
    scale.bundle(out, files)
    result = json.loads(out.read_text())
    assert (result["benchmark"], result["commit"], result["versions"]) == (
        "scale",
        "abc1234",
        "flwr 1.42.0",
    )
    assert [r["nodes"] for r in result["runs"]] == [100, 10000]
    assert not any("log-tail" in r or "commit" in r for r in result["runs"])
    assert "| gsgm | 10,000 | 20,000 |" in tables.RENDERERS["scale"](result)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(files[0].read_text()), "commit": "def5678"}))
    with pytest.raises(SystemExit, match="runs of one commit and versions"):
        scale.bundle(out, [files[0], other])


def churn_result(growth: float) -> dict:
    memory = {"first-quarter-max": 600.0, "last-quarter-max": 600.0 + growth, "growth": growth}
    return {
        "benchmark": "churn",
        "kills": 14,
        "restarts": 14,
        "settings": {
            "nodes": 6,
            "duration": 900.0,
            "kill_every": 60.0,
            "down": 15.0,
            "timeout": 120.0,
            "seed": 0,
            "sample_every": 5.0,
            "memory_bound": 64.0,
        },
        "run": {
            "stopped-by": "max-wall-time",
            "wall-time": 901.8,
            "num-updates": 26,
            "faults": {"timeout": 2, "lost": 9},
            "applied-twice": [],
            "unidentified-nodes": 1,
            "final-accuracy": 0.683,
        },
        "memory-mib": {"serverapp": memory, "superlink": {**memory, "growth": 1.5}},
        "checks": {"reached-budget": True, "serverapp-memory-within-bound": growth <= 64},
    }


def test_a_churn_block_shows_the_run_its_checks_and_memory_growth() -> None:
    made = tables.RENDERERS["churn"](churn_result(-14.6))
    assert "`python benchmarks/churn.py --nodes 6 --duration 900 --kill-every 60 --down 15" in made
    assert "14 SuperNodes killed with SIGKILL and 14 started again" in made
    assert "| max-wall-time | 902 | 26 | lost 9, timeout 2 | none | 1 | 68.3% |" in made
    assert "| ServerApp (`flwr-serverapp`) | 600.0 | 585.4 | -14.6 | yes |" in made
    assert "| SuperLink | 600.0 | 585.4 | +1.5 | yes |" in made
    assert "Checks: reached-budget yes, serverapp-memory-within-bound yes." in made
    grown = tables.RENDERERS["churn"](churn_result(100.0))
    assert "| +100.0 | **no** |" in grown and "serverapp-memory-within-bound **no**" in grown


def test_the_aggregators_table_holds_each_rule_to_its_target() -> None:
    rule = {"ms_per_update": 4.5, "copy_ms": 1.0, "x_copy": 4.5}
    result = {
        "benchmark": "aggregators",
        "commit": "abc1234",
        "date": "2026-11-26",
        "versions": "numpy 2.4.6",
        "cpus": 2,
        "load": [1.0, 2.0],
        "params": 1000,
        "with_base": False,
        "updates": 30,
        "rules": {"ASGD": rule, "GSGM": rule},
        "gsgm_scaling": {"params": 1000, "ms_10_nodes": 2.0, "ms_1000_nodes": 4.0, "ratio": 2.0},
    }
    made = tables.RENDERERS["aggregators"](result)
    assert made.startswith("`python benchmarks/aggregators.py --without-base` at commit abc1234")
    assert "| ASGD | 4.50 | 1.00 | 4.50 | ≤ 4 (not met) |" in made
    assert "| GSGM | 4.50 | 1.00 | 4.50 | ≤ 15 (met) |" in made
    assert "GSGM with 1,000 cached nodes against 10 (1,000 values): 4.00 against 2.00" in made
    assert "ratio 2.00 (target ≤ 1.5: not met)" in made
