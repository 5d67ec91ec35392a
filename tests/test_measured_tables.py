"""The measured benchmarks' tables (scale, fleet) are generated from their committed results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "benchmarks" / "results" / "measured"
DOCS = [ROOT / "benchmarks" / "PERFORMANCE.md", ROOT / "benchmarks" / "RESULTS.md"]


def load_module():
    spec = importlib.util.spec_from_file_location(
        "measured_tables", ROOT / "benchmarks" / "measured_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = load_module()


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
        "strategy": strategy, "nodes": nodes, "updates-asked": 20000, "updates": 20000,
        "actors": 2, "peak-pss-gib": pss, "groups-at-peak-gib": {"Ray actors": 1.1},
        "first-update-wall": 12.0, "median-gap": median, "mean-gap": mean,
        "wall-seconds": 100.0, "final-accuracy": 0.5, "load": [1.0, 2.0],
    }  # fmt: skip


def test_a_scale_block_is_rewritten_with_rows_and_ratios_and_nothing_else(tmp_path) -> None:
    result = {
        "benchmark": "scale", "commit": "abc1234", "versions": "flwr 1.42.0",
        "runs": [scale_run("asgd", 100, 0.0002, 0.004, 2.7),
                 scale_run("asgd", 10000, 0.0004, 0.005, 6.5)],
    }  # fmt: skip
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
        ("<!-- measured from benchmarks/results/measured/none.json -->\n<!-- end measured -->",
         "doc.md:1: benchmarks/results/measured/none.json does not exist"),
        ("<!-- measured from benchmarks/results/measured/odd.json -->\n<!-- end measured -->",
         "doc.md:1: benchmarks/results/measured/odd.json has benchmark 'odd'; tables exist for"),
        ("x\n<!-- measured from benchmarks/results/measured/odd.json -->\nno end",
         "doc.md:2: block without '<!-- end measured -->'"),
    ],
)  # fmt: skip
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
    doc.write_text("<!-- measured from benchmarks/results/measured/fleet-20261124-170758.json -->"
                   "\n<!-- end measured -->\n")  # fmt: skip
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
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("scale", ROOT / "benchmarks" / "scale.py")
        scale = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(scale)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    files = []
    for nodes in (100, 10000):
        run = {**scale_run("gsgm", nodes, 0.0002, 0.004, 2.7), "log-tail": ["x"],
               "commit": "abc1234", "versions": "flwr 1.42.0"}  # fmt: skip
        files.append(tmp_path / f"scale-gsgm-{nodes}.json")
        files[-1].write_text(json.dumps(run))
    out = tmp_path / "measured" / "scale.json"
    scale.bundle(out, files)
    result = json.loads(out.read_text())
    assert (result["benchmark"], result["commit"], result["versions"]) == (
        "scale", "abc1234", "flwr 1.42.0"
    )  # fmt: skip
    assert [r["nodes"] for r in result["runs"]] == [100, 10000]
    assert not any("log-tail" in r or "commit" in r for r in result["runs"])
    assert "| gsgm | 10,000 | 20,000 |" in tables.RENDERERS["scale"](result)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(files[0].read_text()), "commit": "def5678"}))
    with pytest.raises(SystemExit, match="runs of one commit and versions"):
        scale.bundle(out, [files[0], other])
