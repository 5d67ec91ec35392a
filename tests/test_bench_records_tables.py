"""fl_async.bench's records read back without Flower: the report from records equals the report
from histories (the generated tables of a Markdown file: test_claims_blocks.py)."""

from __future__ import annotations

from pathlib import Path

from bench_fakes import FakeLaunch, bench, hand_made_suite, spec

from fl_async.bench.records import load_records
from fl_async.bench.schedule import run_suite

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
SUITES = ROOT / "benchmarks" / "results" / "suites"


# ------------------------------------------------------------------ the report from records


def test_the_report_from_records_equals_the_report_from_histories(tmp_path: Path) -> None:
    suite = hand_made_suite(tmp_path / "suite")
    records = tmp_path / "records"
    assert bench("--out", str(suite), "--report-only") == 0
    assert bench("--out", str(suite), "--export", str(records)) == 0
    assert bench("--out", str(records), "--report-only") == 0
    # every figure the same: results.json byte for byte, report.md but its plot links
    assert (records / "results.json").read_bytes() == (suite / "results.json").read_bytes()
    from_histories = (suite / "report.md").read_text().split("\n")
    from_records = (records / "report.md").read_text().split("\n")
    assert _without_plots(from_histories) == from_records
    assert from_records[0].startswith("# fl-async bench: scenario a (10 nodes")
    assert "- fedbuff seed 1: no grid: re-run" in from_records
    assert bench("--out", str(records), "--report-only", "--grid", "8") == 2


def _without_plots(lines: list[str]) -> list[str]:
    """A report's lines without its plot links and the blank line after each."""
    kept: list[str] = []
    skip = False
    for line in lines:
        if line.startswith("!["):
            skip = True
            continue
        if not (skip and line == ""):
            kept.append(line)
        skip = False
    return kept


def test_a_suite_run_then_exported_reports_the_same(tmp_path: Path) -> None:
    outcome = run_suite(spec(seeds=(0,)), tmp_path / "s", launch=FakeLaunch(), echo=lambda _: None)
    assert len(outcome.ran) == 4
    assert bench("--out", str(tmp_path / "s"), "--report-only") == 0
    assert bench("--out", str(tmp_path / "s"), "--export", str(tmp_path / "r")) == 0
    assert bench("--out", str(tmp_path / "r"), "--report-only") == 0
    assert (tmp_path / "r" / "results.json").read_text() == (
        tmp_path / "s" / "results.json"
    ).read_text()
    assert set(load_records(tmp_path / "r")) == {"dirichlet", "label-skew"}
