"""The claims study's rules (benchmarks/claims: paired, checks, table): exact figures from
counts, every check's verdict, incomplete splits, and the claims block from records."""

from __future__ import annotations

import json
from pathlib import Path

import benchmark_modules  # noqa: F401 (blocks and claims, imported as the scripts do)
import blocks
import pytest
from bench_fakes import bench, run, ssgd, write_runs
from claims import paired
from claims.checks import (
    ASYNC_BASELINES,
    CLAIMS,
    Split,
    converges_alone,
    higher,
    not_lower,
    overall,
    robust_to_non_iid,
    sooner,
    steadier,
)
from claims.paired import Run
from claims.table import budget_lines, defaults_lines, read_splits

from fl_async.bench.records import make_record

SEEDS = (30, 31, 32)


def curve(*counts: int, tests: int = 1000, sigma: float | None = 0.01) -> Run:
    return Run(tuple(counts), tests, sigma)


def split(runs: dict[str, dict[int, Run]], *, nodes: int = 10, alpha: float | None = 0.1) -> Split:
    return Split("claims-a", "dirichlet", "mnist", nodes, alpha, runs, SEEDS)


def every_seed(run: Run) -> dict[int, Run]:
    return dict.fromkeys(SEEDS, run)


def test_an_accuracy_difference_is_exact_at_the_margin() -> None:
    # 100 * (0.948 - 0.958) is -1.0000000000000009 in floats; from counts it is -1.0 exactly.
    assert 100 * (0.948 - 0.958) < -1.0
    runs = {"trendsmooth": every_seed(curve(948)), "ssgd": every_seed(curve(958))}
    check = not_lower(split(runs), "trendsmooth", "ssgd")
    assert check.figure.startswith("-1.0 [-1.0, -1.0]")
    assert check.verdict is True
    runs["trendsmooth"] = every_seed(curve(947))
    assert not_lower(split(runs), "trendsmooth", "ssgd").verdict is False


def test_a_check_missing_a_seed_is_incomplete_never_judged_on_fewer() -> None:
    runs = {
        "mifa": every_seed(curve(950)),
        "fedbuff": every_seed(curve(900)),
        "ssgd": every_seed(curve(900)),
    }
    assert higher(split(runs), "mifa", "fedbuff").verdict is True
    del runs["mifa"][31]
    check = higher(split(runs), "mifa", "fedbuff")
    assert (check.verdict, check.seeds) == (None, 2)
    assert overall([(split(runs), [check])]) == "incomplete (1 of 1 splits)"


def test_reaching_the_target_counts_grid_points_exactly() -> None:
    reference = curve(500, 800, 900)  # target: 9/10 of 900 correct = 810
    assert paired.reach_index(curve(809, 810, 900), reference) == 2
    assert paired.reach_index(curve(100, 200, 809), reference) == 4  # never: G + 1
    runs = {
        "ssgd": every_seed(reference),
        "asp": every_seed(curve(810, 900, 900)),
        "ssp": every_seed(curve(100, 810, 900)),
    }
    check = sooner(split(runs), "asp", "ssp")
    assert check.figure.startswith("-1.0 [-1.0, -1.0]") and check.verdict is True
    assert sooner(split(runs), "ssp", "asp").verdict is False


def test_convergence_is_exact_on_the_last_five_points() -> None:
    ssgd_run = curve(0, 1000, 1000, 1000, 1000, 1000)
    assert paired.converged(curve(0, 900, 900, 900, 900, 900), ssgd_run)
    assert not paired.converged(curve(0, 900, 900, 900, 900, 899), ssgd_run)


def test_steadier_needs_the_gain_and_the_accuracy() -> None:
    runs = {"gsgm": every_seed(curve(900, sigma=0.01)), "asgd": every_seed(curve(900, sigma=0.02))}
    assert steadier(split(runs), "gsgm", "asgd").verdict is True  # +50%, +0.0 points
    runs["gsgm"] = every_seed(curve(899, sigma=0.01))
    assert steadier(split(runs), "gsgm", "asgd").verdict is False  # accuracy below 0
    runs["gsgm"] = every_seed(curve(950, sigma=0.017))
    assert steadier(split(runs), "gsgm", "asgd").verdict is False  # +15% < 20%


def _large(converged_seeds: dict[str, int]) -> Split:
    good, bad = curve(1000, 1000, 1000, 1000, 1000), curve(100, 100, 100, 100, 100)
    runs = {"ssgd": every_seed(good)}
    for name, count in converged_seeds.items():
        runs[name] = {seed: good if i < count else bad for i, seed in enumerate(SEEDS)}
    return split(runs, nodes=30)


def test_only_gsgm_converges_is_refuted_by_one_baseline_and_needs_all_to_hold() -> None:
    assert converges_alone(_large({"gsgm": 3, "asgd": 2})).verdict is False  # 2 of 3 > 40%
    assert converges_alone(_large({"gsgm": 3, "asgd": 1})).verdict is None  # others missing
    good = curve(1000, 1000, 1000, 1000, 1000)
    first_seed = split({"ssgd": {30: good}, "gsgm": {30: good}, "asgd": {30: good}}, nodes=30)
    check = converges_alone(first_seed)  # one seed of three run: the column says 1, not 3
    assert (check.seeds, check.verdict, check.figure) == (1, None, "gsgm 1/1, asgd 1/1")
    everyone = {"gsgm": 3, **dict.fromkeys(ASYNC_BASELINES, 1)}
    check = converges_alone(_large(everyone))
    assert check.verdict is True and check.figure.startswith("gsgm 3/3, asgd 1/3")
    assert converges_alone(_large({**everyone, "gsgm": 2})).verdict is False


def test_claim_three_needs_two_alphas_and_claim_one_at_each() -> None:
    runs = {"gsgm": every_seed(curve(900, sigma=0.01)), "asgd": every_seed(curve(900, sigma=0.02))}
    assert robust_to_non_iid([split(runs)]) is None
    steady = Split("claims-alpha", "dirichlet", "mnist", 10, 1.0, runs, SEEDS)
    assert robust_to_non_iid([split(runs), steady]).verdict is True
    shaky = {**runs, "gsgm": every_seed(curve(900, sigma=0.03))}
    check = robust_to_non_iid([split(runs), Split("x", "d", "mnist", 10, 0.5, shaky, SEEDS)])
    assert check.verdict is False and check.figure == "α 0.1: holds; α 0.5: fails"


def test_which_splits_test_which_claim() -> None:
    by_key = {claim.key: claim for claim in CLAIMS}
    runs = {"ssgd": {}, "gsgm": {}, "asgd": {}, "fadas": {}}
    assert by_key["G2"].tested_on(split(runs, nodes=30))
    assert not by_key["G2"].tested_on(split(runs, nodes=10))
    assert not by_key["G1"].tested_on(split(runs))  # the other baselines are missing
    assert by_key["F2"].tested_on(split(runs, nodes=100))


def test_the_budget_rule_reads_the_last_two_quarters_of_ssgd() -> None:
    climbing = curve(*[500] * 4, *[800] * 2, *[810] * 2)  # third quarter 800, last 810: +1.0
    assert paired.flatness(climbing) == 1.0
    lines = budget_lines([split({"ssgd": every_seed(climbing)})])
    assert lines[-1].endswith("| +1.0 [+1.0, +1.0] | 3 | 3 | holds |")
    steep = curve(*[500] * 4, *[800] * 2, *[811] * 2)
    assert budget_lines([split({"ssgd": every_seed(steep)})])[-1].endswith("| 0 | 3 | fails |")
    one_seed = {"ssgd": {SEEDS[0]: climbing}}
    assert budget_lines([split(one_seed)])[-1].endswith("| 1 | 1 | incomplete (1 of 3 seeds) |")
    # a curve falling at the end counts as flat, and does not cancel one still climbing
    assert paired.climbing([-2.6, 1.5, 2.6]) == 1.4
    assert paired.climbing([-0.0, 0.0]) == 0.0


def test_the_claims_block_is_generated_from_records(tmp_path: Path) -> None:
    histories: dict[str, dict[int, dict]] = {"ssgd": {}, "trendsmooth": {}, "asgd": {}}
    for seed in SEEDS:
        histories["ssgd"][seed] = ssgd([0.1, 0.5, 0.6, 0.7, 0.8])
        histories["trendsmooth"][seed] = run([0.6, 0.8, 0.8, 0.85])
        histories["asgd"][seed] = run([0.5, 0.7, 0.8, 0.85])
    for by_seed in histories.values():
        for history in by_seed.values():
            history["dataset"] = {"name": "mnist", "test-examples": 20}
    write_runs(tmp_path / "suite", histories)
    (tmp_path / "suite" / "suite.json").write_text(json.dumps({"calls": [], "latest": {}}))
    records = tmp_path / "benchmarks" / "claims-a"
    assert bench("--out", str(tmp_path / "suite"), "--export", str(records)) == 0
    text = "<!-- generated claims from benchmarks/claims-a -->\n<!-- end generated -->\n"
    made, found, changed = blocks.generate(text, tmp_path)
    assert len(found) == len(changed) == 1
    assert "| T1 | Trend-Smooth | faster than ASGD at the same iterations | holds |" in made
    assert "| T2 | Trend-Smooth | accuracy near SSGD's | holds |" in made
    assert "| P1 | ASP |" in made and "not tested" in made
    assert "[claims-a, dirichlet](#claims-a-dirichlet)" in made


def test_a_default_changes_only_when_the_tuned_point_is_never_lower_and_once_higher() -> None:
    tuned, default = every_seed(curve(950)), every_seed(curve(900))
    runs = {"ssgd": tuned, "fedbuff": tuned, "fedbuff-default": default}
    same = {"ssgd": tuned, "fedbuff": tuned, "fedbuff-default": tuned}
    dirichlet, skew = split(runs), Split("claims-a", "label-skew", "mnist", 10, None, same, SEEDS)
    assert "Change the default: fedbuff yes." in defaults_lines([dirichlet, skew])[0]
    worse = {**same, "fedbuff": every_seed(curve(880))}
    lower = Split("claims-a", "label-skew", "mnist", 10, None, worse, SEEDS)
    assert "Change the default: fedbuff no." in defaults_lines([dirichlet, lower])[0]
    assert "Change the default: fedbuff no." in defaults_lines([skew])[0]  # never higher
    assert defaults_lines([split({"ssgd": tuned, "fedbuff": tuned})]) == []


def test_one_seed_gives_no_interval_and_no_verdict_and_no_ssgd_tests_nothing() -> None:
    runs = {"mifa": {30: curve(950)}, "fedbuff": {30: curve(900)}, "ssgd": {30: curve(900)}}
    one = Split("claims-a", "dirichlet", "mnist", 10, 0.1, runs, (30,))
    check = higher(one, "mifa", "fedbuff")
    assert (check.verdict, check.seeds) == (None, 1) and "1 seed" in check.figure
    del runs["ssgd"]
    assert not [claim.key for claim in CLAIMS if claim.tested_on(one)]


def test_a_suite_still_running_shows_its_checks_incomplete_not_untested() -> None:
    history = ssgd([0.1, 0.5, 0.6, 0.7, 0.8])
    history["dataset"] = {"name": "mnist", "test-examples": 20}
    history["num-nodes"] = 10
    records = {"dirichlet": {"ssgd": {30: make_record(history, 4)}}}
    (done,) = read_splits("claims-a", records)
    assert done.seeds == (30,) and not by_key("T2").tested_on(done)
    planned = {"strategies": ["ssgd", "trendsmooth"], "seeds": [30, 31, 32]}
    (running,) = read_splits("claims-a", records, planned)
    assert running.seeds == (30, 31, 32) and by_key("T2").tested_on(running)
    check = not_lower(running, "trendsmooth", "ssgd")
    assert (check.verdict, check.seeds) == (None, 0)


def by_key(key: str):
    return next(claim for claim in CLAIMS if claim.key == key)


def test_a_claims_block_covers_every_split_and_names_itself() -> None:
    with pytest.raises(blocks.BlockError, match="<text>:1: a claims block covers every split"):
        blocks.find_blocks(
            ["<!-- generated claims from a b split=dirichlet -->", "<!-- end generated -->"]
        )
    lines = ["<!-- generated claims from a b -->", "<!-- end generated -->"]
    (block,) = blocks.find_blocks(lines)
    assert block.name == "line 1 (generated claims from a b)"


def _ended_early(stop: str, *, faults: dict | None = None, points: int = 2) -> dict:
    """The record of a run over 4 grid points that stopped after ``points`` of them, its final
    model at 0.1 (the model of a run that diverged: every node left, its updates non-finite)."""
    history = run([0.6, 0.8, 0.85, 0.9])
    history["grid-evaluations"] = history["grid-evaluations"][:points]
    history.update(
        {
            "stopped-by": stop,
            "final-accuracy": 0.1,
            "faults": faults or {},
            "dataset": {"name": "mnist", "test-examples": 20},
        }
    )
    return make_record(history)


def test_a_run_that_ends_by_its_own_rule_keeps_its_final_model_to_the_end() -> None:
    """Its seed ends it the same way again: judged with its final accuracy at the points after
    its end, not left out for ever (which would leave every check on it incomplete)."""
    held = paired.read_run(_ended_early("no-active-nodes"))
    assert held is not None and held.correct == (12, 16, 2, 2) and held.tests == 20
    assert paired.read_run(_ended_early("no-progress", points=0)).correct == (2, 2, 2, 2)
    assert paired.read_run(_ended_early("deadlock")).final == 2
    # cut off, or ended by the machine: run again, not judged meanwhile
    assert paired.read_run(_ended_early("max-wall-time")) is None
    assert paired.read_run(_ended_early("no-nodes")) is None
    assert paired.read_run(_ended_early("no-active-nodes", faults={"timeout": 3})) is None
