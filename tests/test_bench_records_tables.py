"""fl_async.bench's records read back without Flower: the report from records, the generated
tables and verdicts of a Markdown file, the real benchmarks/RESULTS.md included."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_fakes import FakeLaunch, bench, hand_made_suite, spec

from fl_async.bench.blocks import find_blocks, generate, repository_root
from fl_async.bench.commands import run_tables
from fl_async.bench.export import export_suite, is_records_folder
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


# ------------------------------------------------------------------------ generated tables

PROSE = "# Results\n\nSome prose, kept as it is.\n"


def markdown_with_blocks(tmp_path: Path) -> Path:
    """A repository in ``tmp_path``: a records folder and a Markdown file with two blocks."""
    (tmp_path / "pyproject.toml").write_text("")
    export_suite(hand_made_suite(tmp_path / "suite"), tmp_path / "bench" / "suites" / "t")
    markdown = tmp_path / "docs" / "R.md"
    markdown.parent.mkdir()
    markdown.write_text(
        f"{PROSE}\n<!-- generated from bench/suites/t -->\nold\n<!-- end generated -->\n\n"
        "Between.\n\n<!-- generated from bench/suites/t split=dirichlet -->\n"
        "<!-- end generated -->\nThe end.\n"
    )
    return markdown


def test_tables_rewrite_every_block_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    markdown = markdown_with_blocks(tmp_path)
    assert repository_root(markdown) == tmp_path.resolve()
    quoted = ["```markdown", "<!-- generated from bench/suites/t -->", "<!-- end generated -->"]
    assert find_blocks([*quoted, "```"]) == []  # a marker quoted in a code block is text
    assert bench("--tables", str(markdown), "--check") == 1
    err = capsys.readouterr().err
    assert "line 5 (generated from bench/suites/t) differs" in err and "line 11" in err
    assert bench("--tables", str(markdown)) == 0
    text = markdown.read_text()
    assert text.startswith(f"{PROSE}\n<!-- generated from bench/suites/t -->\n\n**dirichlet**:")
    assert "\n<!-- end generated -->\n\nBetween.\n\n" in text and text.endswith("The end.\n")
    assert "| gsgm | 0,1,2 |" in text and "- fedbuff seed 1: no grid: re-run" in text
    assert text.count("| strategy | seeds |") == 2 and "old" not in text
    # idempotent: a second run changes nothing, and the check passes
    assert run_tables(markdown) == 0 and markdown.read_text() == text
    assert run_tables(markdown, check=True) == 0
    # a number edited by hand inside a block: the check names the block, writes nothing
    edited = text.replace("| gsgm | 0,1,2 | 80.7", "| gsgm | 0,1,2 | 81.7", 1)
    markdown.write_text(edited)
    assert bench("--tables", str(markdown), "--check") == 1
    assert "line 5 (generated from bench/suites/t) differs" in capsys.readouterr().err
    assert markdown.read_text() == edited


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("<!-- generated from bench/nothing -->\n<!-- end generated -->", "not a records folder"),
        ("<!-- generated from bench/suites/t -->\n", "line 1: the block has no"),
        ("<!-- end generated -->\n", "line 1: '<!-- end generated -->' closes no block"),
        ("<!-- generated from bench/suites/t split=x -->\n<!-- end generated -->", "no split 'x'"),
        ("<!-- generated from  -->\n", "malformed marker"),
        ("<!-- generated verdict of x -->\n", "malformed marker"),
        ("<!-- generated from a b -->\n<!-- end generated -->", "one records folder per table"),
        (
            "<!-- generated verdict from bench/suites/t bench/x -->\n<!-- end generated -->",
            "bench/x is not a records folder",
        ),
    ],
)
def test_bad_blocks_exit_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, block: str, message: str
) -> None:
    markdown = markdown_with_blocks(tmp_path)
    markdown.write_text(block)
    assert bench("--tables", str(markdown)) == 2
    assert message in capsys.readouterr().err
    assert markdown.read_text() == block


def test_results_md_matches_its_records() -> None:
    """benchmarks/RESULTS.md's generated blocks are what benchmarks/results/suites/* give, and
    every records folder there is shown by some block (none of either is consistent too)."""
    text = RESULTS_MD.read_text()
    assert repository_root(RESULTS_MD) == ROOT
    blocks = find_blocks(text.split("\n"))
    sources = [(block, source) for block in blocks for source in block.source.split(" ")]
    used = {(ROOT / source).resolve() for _, source in sources}
    for block, source in sources:
        assert is_records_folder(ROOT / source), f"{block.name}: no records folder {source}"
    folders = {p.resolve() for p in SUITES.glob("*") if p.is_dir()} if SUITES.is_dir() else set()
    assert folders <= used, f"records folders no block shows: {sorted(map(str, folders - used))}"
    made, _, changed = generate(text, ROOT)
    assert not changed, f"out of date: {[b.name for b in changed]}; run fl-async bench --tables"
    assert made == text


# ------------------------------------------------------------------------------- verdict


def metrics_of(accuracies: list[float], sigmas: list[float], converged: bool = True) -> dict:
    return {
        seed: {"final-accuracy": a, "sigma-acc": s, "converged": converged}
        for seed, (a, s) in enumerate(zip(accuracies, sigmas, strict=True))
    }


def test_claim_one_needs_the_gain_and_no_accuracy_loss() -> None:
    from fl_async.bench import verdict

    asgd = metrics_of([0.90, 0.92, 0.94], [0.020, 0.030, 0.010])
    steady = metrics_of([0.91, 0.93, 0.95], [0.010, 0.015, 0.005])  # 50% steadier, +1 pt
    less_accurate = metrics_of([0.85, 0.88, 0.90], [0.010, 0.015, 0.005])
    rows = verdict.comparison_rows({"asgd": asgd, "gsgm": steady, "gsgm-x": less_accurate})
    assert [(r["run"], r["against"], r["claim"]) for r in rows] == [
        ("gsgm", "asgd", True),
        ("gsgm-x", "asgd", False),
    ]
    assert rows[0]["accuracy"].value == pytest.approx(1.0)
    assert rows[0]["gain"].value == pytest.approx(0.5)
    # a 10% gain is not enough; one seed decides nothing
    slight = metrics_of([0.91, 0.93, 0.95], [0.018, 0.027, 0.009])
    assert not verdict.comparison_rows({"asgd": asgd, "gsgm": slight})[0]["claim"]
    one = verdict.comparison_rows({"asgd": {0: asgd[0]}, "gsgm": {0: steady[0]}})
    assert one[0]["claim"] is None
    # the margin is judged on the printed value: the GSGM study's E1 cell against Trend-Smooth
    from fl_async.bench.stats import Estimate

    gain = Estimate(0.58, 0.41, 0.65, 5)
    at_margin = Estimate(0.2, 100 * (0.948 - 0.958), 1.5, 5)
    assert at_margin.low < verdict.ACCURACY_MARGIN
    assert verdict.claim_one(at_margin, gain) is True
    assert verdict.claim_one(Estimate(0.2, -1.05, 1.5, 5), gain) is False  # prints as -1.1


def test_claim_two_and_three_rules() -> None:
    from fl_async.bench import verdict

    gsgm = metrics_of([0.9] * 5, [0.01] * 5)
    asgd = {s: {**m, "converged": s < 2} for s, m in metrics_of([0.8] * 5, [0.02] * 5).items()}
    assert verdict.claim_two(verdict.converged_counts({"gsgm": gsgm, "asgd": asgd}), "gsgm") is True
    asgd[2]["converged"] = True  # a third seed: "only GSGM converges" is refuted
    assert (
        verdict.claim_two(verdict.converged_counts({"gsgm": gsgm, "asgd": asgd}), "gsgm") is False
    )
    # a baseline whose runs were all stopped by the wall limit is not judged: no verdict, not "yes"
    capped = {s: {**m, "converged": None} for s, m in asgd.items()}
    counts = verdict.converged_counts({"gsgm": gsgm, "asgd": capped})
    assert counts["asgd"] == (0, 0) and verdict.claim_two(counts, "gsgm") is None
    capped[0]["converged"] = False  # one judged seed is still too few
    counts = verdict.converged_counts({"gsgm": gsgm, "asgd": capped})
    assert counts["asgd"] == (0, 1) and verdict.claim_two(counts, "gsgm") is None
    split = verdict.Split
    other = metrics_of([0.5] * 5, [0.01] * 5)
    text = "\n".join(
        verdict.verdict_lines(
            [("b", {"dirichlet": split({"gsgm": gsgm, "asgd": asgd}, nodes=30, alpha=0.1)}),
             ("alpha-b", {"dirichlet": split({"gsgm": other, "asgd": asgd}, nodes=10, alpha=1.0)}),
             ("skew", {"label-skew": split({"gsgm": gsgm, "asgd": asgd}, nodes=10)})]
        )
    )  # fmt: skip
    assert "**b, dirichlet** (seeds 0, 1, 2, 3, 4)" in text
    assert "| gsgm | asgd | +10.0 [+10.0, +10.0] | +50% [+50%, +50%] | yes |" in text
    # claim 2 at 30 nodes only; claim 3 over the Dirichlet alphas (label skew is not one)
    assert text.count("Claim 2's rule") == 1 and "of its seeds): gsgm: no." in text
    assert (
        "Claim 3's rule (claim 1 against ASGD at every Dirichlet alpha above: 0.1, 1): "
        "gsgm: no." in text
    )
    one_alpha = verdict.verdict_lines(
        [("a", {"dirichlet": split({"gsgm": gsgm, "asgd": asgd}, nodes=10, alpha=0.1)})]
    )
    assert not any("Claim 2" in line or "Claim 3" in line for line in one_alpha)  # fmt: skip


def test_a_verdict_block_is_generated_from_records(tmp_path: Path) -> None:
    markdown = markdown_with_blocks(tmp_path)
    markdown.write_text("<!-- generated verdict from bench/suites/t -->\n<!-- end generated -->\n")
    assert bench("--tables", str(markdown)) == 0
    text = markdown.read_text()
    assert text.startswith("<!-- generated verdict from bench/suites/t -->\n\nClaim 1 holds")
    assert "| gsgm | asgd |" in text and "Converged (seeds):" in text
    assert run_tables(markdown, check=True) == 0
