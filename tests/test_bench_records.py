"""fl_async.bench's raw results: compact records, the export, the report from records, and the
generated tables of a Markdown file (the real benchmarks/RESULTS.md included). No Flower."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bench_fakes import SUITE, FakeLaunch, old, run, spec, ssgd, write_runs

from fl_async.bench.blocks import find_blocks, generate, repository_root
from fl_async.bench.commands import run_tables
from fl_async.bench.export import SUITE_FORMAT, export_suite, is_records_folder, merge_suite
from fl_async.bench.records import RECORD_FORMAT, dumps, load_records, make_record
from fl_async.bench.schedule import run_suite
from fl_async.cli import main as fl_async_main
from fl_async.config import DEFAULTS
from fl_async.validation import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
SUITES = ROOT / "benchmarks" / "results" / "suites"


def bench(*argv: str) -> int:
    """``fl-async bench ARGV``'s exit code."""
    return fl_async_main(["bench", *argv])


def hand_made_suite(out: Path) -> Path:
    """``test_bench.SUITE`` (one run made before the grid) as a suite folder with a suite.json."""
    write_runs(out, SUITE)
    latest = spec(scenario=spec().scenario, grid=4).as_json()
    latest["run-config"] = {"data-root": "/home/someone/data", "local-epochs": 1}
    call = {"at": "2026-11-23T03:57:00+0000", "argv": ["/x/.venv/bin/fl-async", "bench"], **latest}
    (out / "suite.json").write_text(json.dumps({"calls": [call], "latest": latest}))
    return out


# ------------------------------------------------------------------------------- records


def test_a_record_keeps_what_the_report_reads_and_no_update_log() -> None:
    history = run([0.5, 0.6, 0.7, 0.9])
    history["config"].update({"strategy": "asgd", "asgd.lr": 0.5, "gsgm.lr": 0.1})
    history["config"].update({"output-dir": "/tmp/x", "data-root": "/home/y"})
    history["updates"] = [{"staleness": s, "accepted": 1, "stable-id": s % 3} for s in range(7)]
    history.update({"num-nodes": 3, "faults": {"timeout": 2}, "rejected": {"stale": 1}})
    record = make_record(history, 40)
    assert record["format"] == RECORD_FORMAT and "updates" not in record
    # the machine's paths and the other strategies' keys are left out
    assert "asgd.lr" in record["config"] and "gsgm.lr" not in record["config"]
    assert "output-dir" not in record["config"] and "data-root" not in record["config"]
    grid = record["grid"]
    assert (grid["source"], grid["size"], grid["budget"]) == ("recorded", 4, 400.0)
    assert grid["evaluations"][1] == {"index": 2, "virtual-time": 200.0, "wall-time": 6.0,
                                      "accuracy": 0.6, "loss": 1.0, "server-step": 8}  # fmt: skip
    summary = record["summary"]
    assert (summary["staleness-mean"], summary["staleness-max"]) == (3.0, 6)
    assert (summary["replies"], summary["applied"], summary["evaluations"]) == (7, 7, 5)
    assert (summary["faults"], summary["rejected"]) == ({"timeout": 2}, {"stale": 1})
    assert record["node-updates"] == {"0": 3, "1": 2, "2": 2}
    assert record["run"] == {"num-nodes": 3}
    # SSGD's grid is derived from its every-step evaluations, and says so
    derived = make_record(ssgd([0.1, 0.5, 0.6, 0.7, 0.8]), 8)["grid"]
    assert (derived["source"], derived["size"], len(derived["evaluations"])) == ("derived", 8, 8)
    assert make_record(old([0.5]))["grid"] is None


def test_dumps_is_deterministic_with_sorted_keys_and_exact_floats() -> None:
    value = {"b": [0.1 + 0.2, 1 / 3], "a": {"z": 1, "y": None}, "c": [{"k": 1}, []]}
    text = dumps(value)
    assert text == dumps(json.loads(text)) and text.endswith("}\n")
    assert json.loads(text) == value  # floats round-trip exactly
    assert text.index('"a"') < text.index('"b"') and '"y": null, "z": 1' in text
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


# -------------------------------------------------------------------------------- export


def test_export_writes_suite_json_and_one_record_per_run(tmp_path: Path) -> None:
    suite = hand_made_suite(tmp_path / "suite")
    assert bench("--out", str(suite), "--export", str(tmp_path / "records")) == 0
    records = tmp_path / "records"
    assert is_records_folder(records) and not is_records_folder(suite)
    settings = json.loads((records / "suite.json").read_text())
    assert settings["format"] == SUITE_FORMAT and settings["grid"] == 4
    assert settings["settings"]["strategies"] == ["asgd", "ssgd"]
    assert settings["settings"]["run-config"] == {"local-epochs": 1}  # no data-root path
    assert settings["command"] == "fl-async bench"
    assert settings["records"]["dirichlet"]["fedbuff"] == [0, 1]
    files = sorted(p.relative_to(records).as_posix() for p in records.rglob("*.json"))
    assert len(files) == 12 and "dirichlet/gsgm-seed2.json" in files
    record = json.loads((records / "dirichlet" / "ssgd-seed1.json").read_text())
    assert (record["split"], record["strategy"], record["seed"]) == ("dirichlet", "ssgd", 1)
    assert record["grid"]["size"] == 4  # the split's recorded G, not the suite's
    assert max(p.stat().st_size for p in records.rglob("*.json")) < 4000
    before = {p: p.read_bytes() for p in records.rglob("*.json")}
    assert bench("--out", str(suite), "--export", str(records)) == 0
    assert {p: p.read_bytes() for p in records.rglob("*.json")} == before  # byte-identical
    # a run the suite no longer has loses its record
    shutil.rmtree(suite / "dirichlet" / "fedbuff-seed1")
    assert bench("--out", str(suite), "--export", str(records)) == 0
    assert not (records / "dirichlet" / "fedbuff-seed1.json").exists()
    assert set(load_records(records)["dirichlet"]["fedbuff"]) == {0}


def test_export_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = hand_made_suite(tmp_path / "suite")
    with pytest.raises(InvalidArgument, match="is the suite folder"):
        export_suite(suite, suite)
    hand_made_suite(tmp_path / "other")
    with pytest.raises(InvalidArgument, match="other is a suite folder"):
        export_suite(suite, tmp_path / "other")
    with pytest.raises(InvalidArgument, match="nothing to export"):
        export_suite(tmp_path, tmp_path / "records")
    export_suite(suite, tmp_path / "records")
    assert bench("--out", str(tmp_path / "records"), "--export", str(tmp_path / "again")) == 2
    assert "is a records folder already" in capsys.readouterr().err
    assert bench("--out", str(tmp_path / "missing"), "--export", str(tmp_path / "x")) == 2
    assert "no suite folder" in capsys.readouterr().err
    # a suite is never run into a records folder (its suite.json is not a suite folder's)
    assert bench("--out", str(tmp_path / "records"), "--strategies", "ssgd") == 2
    assert "is a records folder: use --report-only" in capsys.readouterr().err
    assert bench("--export", str(tmp_path / "x")) == 2
    assert "--out is required" in capsys.readouterr().err
    assert bench("--out", str(suite), "--check") == 2
    assert "--check goes with --tables" in capsys.readouterr().err


def _suite_part(out: Path, seeds: tuple[int, ...], at: str) -> Path:
    """``hand_made_suite``'s runs of ``seeds`` only, as a suite folder called at ``at``."""
    write_runs(
        out, {name: {s: h for s, h in runs.items() if s in seeds} for name, runs in SUITE.items()}
    )
    latest = spec(scenario=spec().scenario, grid=4, seeds=seeds).as_json()
    argv = ["/x/.venv/bin/fl-async", "bench", "--seeds", ",".join(map(str, seeds))]
    call = {"at": at, "argv": argv, **latest}
    (out / "suite.json").write_text(json.dumps({"calls": [call], "latest": latest}))
    return out


def test_merge_adds_a_later_part_of_a_suite_and_keeps_what_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    whole, records = tmp_path / "whole", tmp_path / "records"
    expected = tmp_path / "expected"
    assert bench("--out", str(hand_made_suite(whole)), "--export", str(expected)) == 0
    first = _suite_part(tmp_path / "first", (0, 1), "2026-11-23T01:00:00+0000")
    assert bench("--out", str(first), "--export", str(records)) == 0
    kept = {p: p.read_bytes() for p in records.rglob("*-seed*.json")}
    second = _suite_part(tmp_path / "second", (1, 2), "2026-11-24T01:00:00+0000")
    assert bench("--out", str(second), "--export", str(records), "--merge") == 0
    out = capsys.readouterr().out
    # seed 1 is in both parts: its records stay as they were, and the note compares the runs
    assert "dirichlet/asgd-seed1: kept the record already there; the new run's grid " \
        "accuracies are identical" in out  # fmt: skip
    assert all(p.read_bytes() == before for p, before in kept.items())
    assert load_records(records) == load_records(expected)
    merged = json.loads((records / "suite.json").read_text())
    assert merged["records"] == json.loads((expected / "suite.json").read_text())["records"]
    assert merged["settings"]["seeds"] == [0, 1, 2]
    assert [call["at"] for call in merged["calls"]] == [
        "2026-11-23T01:00:00+0000", "2026-11-24T01:00:00+0000"]  # fmt: skip
    assert merged["command"] == "fl-async bench --seeds 1,2"
    # merging the same part again changes nothing
    before = {p: p.read_bytes() for p in records.rglob("*.json")}
    assert bench("--out", str(second), "--export", str(records), "--merge") == 0
    assert {p: p.read_bytes() for p in records.rglob("*.json")} == before


def test_merge_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    records = tmp_path / "records"
    part = _suite_part(tmp_path / "part", (0,), "2026-11-23T01:00:00+0000")
    with pytest.raises(InvalidArgument, match="not a records folder; export the first part"):
        merge_suite(part, records)
    export_suite(part, records)
    other = _suite_part(tmp_path / "other", (2,), "2026-11-24T01:00:00+0000")
    suite_json = json.loads((other / "suite.json").read_text())
    suite_json["latest"]["nodes"] = 8
    (other / "suite.json").write_text(json.dumps(suite_json))
    with pytest.raises(InvalidArgument, match="differ from the records folder's in nodes"):
        merge_suite(other, records)
    suite_json["latest"]["nodes"] = 4
    suite_json["latest"]["variants"] = {"x": {"preset": "gsgm", "run-config": {"gsgm.lr": 1.0}}}
    (other / "suite.json").write_text(json.dumps(suite_json))
    merge_suite(other, records)  # a new variant is added to the folder's
    assert json.loads((records / "suite.json").read_text())["settings"]["variants"] == {
        "x": {"preset": "gsgm", "run-config": {"gsgm.lr": 1.0}}}  # fmt: skip
    suite_json["latest"]["variants"]["x"]["run-config"] = {"gsgm.lr": 0.5}
    (other / "suite.json").write_text(json.dumps(suite_json))
    with pytest.raises(InvalidArgument, match="variant 'x' is .* give the new one another name"):
        merge_suite(other, records)
    changed = _suite_part(tmp_path / "changed", (0,), "2026-11-24T01:00:00+0000")
    history_path = changed / "dirichlet" / "asgd-seed0" / "history.json"
    history = json.loads(history_path.read_text())
    history["config"]["lr"] = 0.5
    history_path.write_text(json.dumps(history))
    with pytest.raises(InvalidArgument, match="asgd-seed0 is in both with different run configs"):
        merge_suite(changed, records)
    assert bench("--out", str(part), "--merge") == 2
    assert "--merge goes with --export" in capsys.readouterr().err


def test_merge_takes_a_key_added_since_a_record_at_its_default(tmp_path: Path) -> None:
    """A run made after the schema gained a key (at the default that keeps what runs did) is the
    same run as one recorded before: the merge keeps the record; another value is refused."""
    records = tmp_path / "records"
    export_suite(_suite_part(tmp_path / "part", (0,), "2026-11-23T01:00:00+0000"), records)
    for value, kept in ((DEFAULTS["synthetic.devices"], True), (7, False)):
        later = _suite_part(tmp_path / f"later-{value}", (0,), "2026-11-24T01:00:00+0000")
        history_path = later / "dirichlet" / "asgd-seed0" / "history.json"
        history = json.loads(history_path.read_text())
        assert "synthetic.devices" not in history["config"]
        history["config"]["synthetic.devices"] = value
        history_path.write_text(json.dumps(history))
        if kept:
            _, notes = merge_suite(later, records)
            assert any(note.startswith("dirichlet/asgd-seed0: kept the record") for note in notes)
        else:
            refused = r"different run configs \(synthetic.devices\)"
            with pytest.raises(InvalidArgument, match=refused):
                merge_suite(later, records)


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
