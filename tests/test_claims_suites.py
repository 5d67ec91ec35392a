"""benchmarks/claims_suites.sh runs every preset at the point the sweep chose, and refuses what
it does not know."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "claims_suites.sh"


def test_every_preset_runs_at_the_point_the_sweep_chose() -> None:
    """TUNED holds what the sweep record the script names (in the comment above it) chose."""
    text = SCRIPT.read_text(encoding="utf-8")
    line = re.search(r'^TUNED="(.*)"$', text, re.MULTILINE)
    named = re.search(r"\((benchmarks/results/suites/[\w.-]+/tuned\.json)\)", text)
    assert line is not None and named is not None
    given = dict(item.split("=") for item in line.group(1).split())
    chosen = json.loads((ROOT / named.group(1)).read_text(encoding="utf-8"))["chosen"]
    changed = {
        key: str(value)
        for point in chosen.values()
        if point["name"] not in chosen  # a variant: the sweep chose a point off the default
        for key, value in point["run-config"].items()
    }
    assert given == changed
    assert set(chosen) == set(
        re.search(r"^ALL=(.*)$", SCRIPT.read_text(), re.M).group(1).split(",")
    )


def test_each_preset_chosen_off_its_default_also_runs_at_its_default() -> None:
    """The ``-default`` variants are exactly the presets the sweep chose off their default, each
    at its default point's settings (as the sweep ran it)."""
    text = SCRIPT.read_text(encoding="utf-8")
    named = re.search(r"\((benchmarks/results/suites/[\w.-]+/tuned\.json)\)", text)
    tuned = json.loads((ROOT / named.group(1)).read_text(encoding="utf-8"))
    variants = re.findall(r'--variant "(\w+)-default=(\w+) ([\w.]+)=([^"]+)"', text)
    given = {
        preset: {key: tomllib.loads(f"v = {value}")["v"]}
        for name, preset, key, value in variants
        if name == preset
    }
    assert len(given) == len(variants)
    off = {p for p, point in tuned["chosen"].items() if point["name"] != p}
    assert set(given) == off
    for preset in off:
        (default,) = [pt for pt in tuned["points"][preset] if pt["name"] == preset]
        assert given[preset] == default["run-config"], preset


def test_an_unknown_suite_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "suites"), "claims-s30", "claims-nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no suite claims-nope; allowed: claims-a-dir claims-alpha0.05" in done.stderr
    assert not (tmp_path / "suites").exists()  # not even the first suite started


def test_every_suite_checkpoints_its_runs_and_turns_the_guard_off() -> None:
    """A run cut off resumes from its checkpoint, and no honest update is refused: every suite's
    run config says so."""
    text = SCRIPT.read_text(encoding="utf-8")
    assert re.search(r'^CHECKPOINT="checkpoint-every=\d+"$', text, re.MULTILINE)
    assert re.search(r'^GUARD="guard.factor=0"$', text, re.MULTILINE)
    assert re.search(r'^CONFIG="\$TUNED \$CHECKPOINT \$GUARD"$', text, re.MULTILINE)
    configs = re.findall(r'--run-config "([^"]*)"', text)
    assert len(configs) == 6 and all(c.startswith("$CONFIG") for c in configs)


def test_by_default_the_protocols_five_suites_run_in_its_order(tmp_path: Path) -> None:
    fake, log = _fake_python(tmp_path)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "suites")],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    outs = [
        re.search(r"--out \S+/(claims-[\w.-]+)", call).group(1)
        for call in log.read_text().splitlines()
    ]
    assert outs == [
        "claims-a-dir",
        "claims-alpha0.05",
        "claims-alpha0.5",
        "claims-alpha1.0",
        "claims-s30",
    ]


def test_the_script_runs_the_suites_and_budgets_the_compute_estimate_planned(
    tmp_path: Path,
) -> None:
    """claims_compute.py's SUITES less CUT run by default, in its order; every suite, cut or not,
    at the SSGD rounds its estimate assumed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        planned = importlib.import_module("claims_compute")
    fake, log = _fake_python(tmp_path)
    for names in ([], planned.CUT):
        done = subprocess.run(
            ["bash", str(SCRIPT), str(tmp_path / "suites"), *names],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    calls = [
        re.search(r"--rounds (\d+) .*--out \S+/(claims-[\w.-]+)", call).groups()
        for call in log.read_text().splitlines()
    ]
    run = [name for name in planned.SUITES if name not in planned.CUT]
    assert [name for _, name in calls] == [*run, *planned.CUT]
    assert {name: int(rounds) for rounds, name in calls} == {
        name: plan["rounds"] for name, plan in planned.SUITES.items()
    }


def test_no_committed_run_outside_the_study_used_its_evaluation_seeds() -> None:
    """The evaluation seeds are new: no records folder but the study's own holds a run on one."""
    text = SCRIPT.read_text(encoding="utf-8")
    seeds = {int(s) for s in re.search(r"--seeds ([\d,]+)", text).group(1).split(",")}
    used = set()
    for path in (ROOT / "benchmarks" / "results" / "suites").glob("*/*/*.json"):
        found = re.search(r"-seed(\d+)\.json$", path.name)
        if found and not path.parts[-3].startswith("claims-"):
            used.add(int(found.group(1)))
    assert len(seeds) == 10 and used and not seeds & used, sorted(seeds & used)


def _fake_python(tmp_path: Path, then: str = "") -> tuple[Path, Path]:
    """A stand-in for the suites' Python that logs each call's arguments, one line per call,
    then runs the bash line ``then``."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n{then}\n')
    fake.chmod(0o755)
    return fake, log


def test_a_suite_skips_the_runs_its_committed_records_hold(tmp_path: Path) -> None:
    fake, log = _fake_python(tmp_path)
    records = tmp_path / "records"
    (records / "claims-s30").mkdir(parents=True)
    (records / "claims-s30" / "suite.json").write_text("{}")
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "suites"), "claims-s30", "claims-b"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "RECORDS": str(records)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    s30, b = log.read_text().splitlines()
    assert f"--records {records}/claims-s30 " in s30 and "--scenario s" in s30
    assert "--records" not in b and "--scenario b" in b


def test_export_adds_every_finished_run_to_the_records_folders(tmp_path: Path) -> None:
    fake, log = _fake_python(tmp_path)
    suites, records = tmp_path / "suites", tmp_path / "records"
    for name in ("claims-a-dir", "claims-s30"):
        (suites / name / "natural" / "ssgd-seed40").mkdir(parents=True)
    (suites / "claims-s30" / "natural" / "ssgd-seed40" / "history.json").write_text("{}")
    (suites / "claims-b" / "dirichlet" / "ssgd-seed40").mkdir(parents=True)
    (suites / "claims-b" / "dirichlet" / "ssgd-seed40" / "history.json").write_text("{}")
    (records / "claims-b").mkdir(parents=True)
    (records / "claims-b" / "suite.json").write_text("{}")
    done = subprocess.run(
        ["bash", str(SCRIPT), "--export", str(suites), str(records)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [  # claims-a-dir has no finished run: not exported
        f"-m fl_async.cli bench --out {suites}/claims-s30 --export {records}/claims-s30",
        f"-m fl_async.cli bench --out {suites}/claims-b --export {records}/claims-b --merge",
    ]


def test_jobs_sets_the_runs_at_a_time_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    """Two at a time by default, JOBS=1 one at a time; anything but a whole number of runs is
    refused, naming it, before any suite starts."""
    fake, log = _fake_python(tmp_path)
    for jobs in (None, "1", "two", "0"):
        env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake)} | ({"JOBS": jobs} if jobs else {})
        done = subprocess.run(
            ["bash", str(SCRIPT), str(tmp_path / jobs_dir(jobs)), "claims-alpha0.5"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if jobs in ("two", "0"):
            assert done.returncode == 2
            assert f"JOBS={jobs}; allowed: a whole number of runs at a time" in done.stderr
            assert not (tmp_path / jobs_dir(jobs)).exists()
        else:
            assert done.returncode == 0, done.stderr
    default, one = log.read_text().splitlines()
    assert " --jobs 2 " in default and " --jobs 1 " in one


def jobs_dir(jobs: str | None) -> str:
    """A suites folder per JOBS value tried."""
    return f"suites-{jobs or 'default'}"


def test_a_suite_with_a_failed_run_does_not_stop_the_next_but_an_interrupt_does(
    tmp_path: Path,
) -> None:
    # the first suite's bench call exits $FIRST (1: a run failed; 130: interrupted)
    fake, log = _fake_python(tmp_path, "[[ $* == *claims-alpha0.5* ]] && exit $FIRST\nexit 0")
    said = {}
    for first, code, calls in (("1", 1, 2), ("130", 130, 1)):
        log.unlink(missing_ok=True)
        done = subprocess.run(
            ["bash", str(SCRIPT), str(tmp_path / "s"), "claims-alpha0.5", "claims-alpha1.0"],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "FIRST": first},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, done.stderr
        assert len(log.read_text().splitlines()) == calls
        said[first] = done.stderr
    assert "runs failed in: claims-alpha0.5 (exit 1); the same command runs them" in said["1"]
    assert "runs failed in" not in said["130"]
