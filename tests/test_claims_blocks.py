"""benchmarks/blocks.py, the one mechanism of the generated blocks of benchmarks/RESULTS.md and
benchmarks/PERFORMANCE.md, on blocks made from records folders: every block rewritten and
nothing else, ``--check``, bad blocks, the claims' verdicts, and the real RESULTS.md regenerated
unchanged from the committed records."""

from __future__ import annotations

from pathlib import Path

import benchmark_modules  # noqa: F401 (blocks and claims, imported as the scripts do)
import blocks
import pytest
from bench_fakes import hand_made_suite
from claims import verdict

from fl_async.bench.export import export_suite, is_records_folder
from fl_async.bench.stats import Estimate

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
SUITES = ROOT / "benchmarks" / "results" / "suites"


# ------------------------------------------------------------------------ generated tables

PROSE = "# Results\n\nSome prose, kept as it is.\n"


def markdown_with_blocks(tmp_path: Path) -> Path:
    """A repository in ``tmp_path``: a records folder and a Markdown file with two blocks."""
    export_suite(hand_made_suite(tmp_path / "suite"), tmp_path / "bench" / "suites" / "t")
    markdown = tmp_path / "docs" / "R.md"
    markdown.parent.mkdir()
    markdown.write_text(
        f"{PROSE}\n<!-- generated from bench/suites/t -->\nold\n<!-- end generated -->\n\n"
        "Between.\n\n<!-- generated from bench/suites/t split=dirichlet -->\n"
        "<!-- end generated -->\nThe end.\n"
    )
    return markdown


@pytest.fixture
def at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the repository root that block paths are relative to."""
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    return tmp_path


def test_tables_rewrite_every_block_and_nothing_else(
    at: Path, capsys: pytest.CaptureFixture
) -> None:
    markdown = markdown_with_blocks(at)
    quoted = ["```markdown", "<!-- generated from bench/suites/t -->", "<!-- end generated -->"]
    assert blocks.find_blocks([*quoted, "```"]) == []  # a marker quoted in a code block is text
    assert blocks.main([str(markdown), "--check"]) == 1
    err = capsys.readouterr().err
    assert "line 5 (generated from bench/suites/t) differs" in err and "line 11" in err
    assert blocks.main([str(markdown)]) == 0
    text = markdown.read_text()
    assert text.startswith(f"{PROSE}\n<!-- generated from bench/suites/t -->\n\n**dirichlet**:")
    assert "\n<!-- end generated -->\n\nBetween.\n\n" in text and text.endswith("The end.\n")
    assert "| gsgm | 0,1,2 |" in text and "- fedbuff seed 1: no grid: re-run" in text
    assert text.count("| strategy | seeds |") == 2 and "old" not in text
    # idempotent: a second run changes nothing, and the check passes
    assert blocks.main([str(markdown)]) == 0 and markdown.read_text() == text
    assert blocks.main([str(markdown), "--check"]) == 0
    # a number edited by hand inside a block: the check names the block, writes nothing
    edited = text.replace("| gsgm | 0,1,2 | 80.7", "| gsgm | 0,1,2 | 81.7", 1)
    markdown.write_text(edited)
    assert blocks.main([str(markdown), "--check"]) == 1
    assert "line 5 (generated from bench/suites/t) differs" in capsys.readouterr().err
    assert markdown.read_text() == edited


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("<!-- generated from bench/nothing -->\n<!-- end generated -->", "not a records folder"),
        ("<!-- generated from bench/suites/t -->\n", "R.md:1: block without '<!-- end generated"),
        ("<!-- end generated -->\n", "R.md:1: '<!-- end generated -->' closes no block"),
        ("<!-- generated from bench/suites/t -->\n<!-- end measured -->", "R.md:2: '<!-- end m"),
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
    at: Path, capsys: pytest.CaptureFixture, block: str, message: str
) -> None:
    markdown = markdown_with_blocks(at)
    markdown.write_text(block)
    assert blocks.main([str(markdown)]) == 2
    assert message in capsys.readouterr().err
    assert markdown.read_text() == block


def test_results_md_matches_its_records() -> None:
    """benchmarks/RESULTS.md's generated blocks are what benchmarks/results/suites/* give, and
    every records folder there is shown by some block (none of either is consistent too)."""
    text = RESULTS_MD.read_text()
    found = [b for b in blocks.find_blocks(text.split("\n")) if b.kind != blocks.MEASURED]
    assert {b.kind for b in found} == {"generated", "verdict", "claims", "tuned"}
    sources = [(block, source) for block in found for source in block.source.split(" ")]
    used = {(ROOT / source).resolve() for _, source in sources}
    for block, source in sources:
        assert is_records_folder(ROOT / source), f"{block.name}: no records folder {source}"
    folders = {p.resolve() for p in SUITES.glob("*") if p.is_dir()} if SUITES.is_dir() else set()
    assert folders <= used, f"records folders no block shows: {sorted(map(str, folders - used))}"
    made, _, changed = blocks.generate(text, ROOT)
    assert not changed, f"out of date: {[b.name for b in changed]}; run benchmarks/blocks.py"
    assert made == text


def test_the_check_of_both_files_passes_and_names_a_table_edited_by_hand(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``python benchmarks/blocks.py benchmarks/RESULTS.md benchmarks/PERFORMANCE.md --check``
    as the repository holds them; then a figure of a claims table edited by hand, in a file
    that holds RESULTS.md's claims block alone."""
    files = [str(RESULTS_MD), str(ROOT / "benchmarks" / "PERFORMANCE.md")]
    assert blocks.main([*files, "--check"]) == 0
    # The block alone: the check above made every other block of RESULTS.md again, and making
    # them twice more (check, rewrite) would cost seconds to show nothing new.
    whole = RESULTS_MD.read_text()
    start = whole.index("<!-- generated claims from ")
    end = blocks.RECORDS.END
    text = whole[start : whole.index(end, start) + len(end)] + "\n"
    row = text.index("| holds |")
    edited = text[:row] + "| fails |" + text[row + len("| holds |") :]
    (tmp_path / "R.md").write_text(edited)
    assert blocks.main([str(tmp_path / "R.md"), "--check"]) == 1
    assert (
        "(generated claims from benchmarks/results/suites/claims-a-dir" in capsys.readouterr().err
    )
    assert blocks.main([str(tmp_path / "R.md")]) == 0 and (tmp_path / "R.md").read_text() == text


# ------------------------------------------------------------------------------- verdict


def metrics_of(accuracies: list[float], sigmas: list[float], converged: bool = True) -> dict:
    return {
        seed: {"final-accuracy": a, "sigma-acc": s, "converged": converged}
        for seed, (a, s) in enumerate(zip(accuracies, sigmas, strict=True))
    }


def test_claim_one_needs_the_gain_and_no_accuracy_loss() -> None:
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
    gain = Estimate(0.58, 0.41, 0.65, 5)
    at_margin = Estimate(0.2, 100 * (0.948 - 0.958), 1.5, 5)
    assert at_margin.low < verdict.ACCURACY_MARGIN
    assert verdict.claim_one(at_margin, gain) is True
    assert verdict.claim_one(Estimate(0.2, -1.05, 1.5, 5), gain) is False  # prints as -1.1


def test_claim_two_and_three_rules() -> None:
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
            [
                ("b", {"dirichlet": split({"gsgm": gsgm, "asgd": asgd}, nodes=30, alpha=0.1)}),
                (
                    "alpha-b",
                    {"dirichlet": split({"gsgm": other, "asgd": asgd}, nodes=10, alpha=1.0)},
                ),
                ("skew", {"label-skew": split({"gsgm": gsgm, "asgd": asgd}, nodes=10)}),
            ]
        )
    )
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
    assert not any("Claim 2" in line or "Claim 3" in line for line in one_alpha)


def test_a_verdict_block_is_generated_from_records(at: Path) -> None:
    markdown = markdown_with_blocks(at)
    markdown.write_text("<!-- generated verdict from bench/suites/t -->\n<!-- end generated -->\n")
    assert blocks.main([str(markdown)]) == 0
    text = markdown.read_text()
    assert text.startswith("<!-- generated verdict from bench/suites/t -->\n\nClaim 1 holds")
    assert "| gsgm | asgd |" in text and "Converged (seeds):" in text
    assert blocks.main([str(markdown), "--check"]) == 0
