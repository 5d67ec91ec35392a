"""benchmarks/claims_suites.sh runs every preset at the point the sweep chose, and refuses what
it does not know."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "claims_suites.sh"
TUNED = ROOT / "benchmarks" / "results" / "suites" / "presets-a-sweep" / "tuned.json"


def test_every_preset_runs_at_the_point_the_sweep_chose() -> None:
    line = re.search(r'^TUNED="(.*)"$', SCRIPT.read_text(encoding="utf-8"), re.MULTILINE)
    assert line is not None
    given = dict(item.split("=") for item in line.group(1).split())
    chosen = json.loads(TUNED.read_text(encoding="utf-8"))["chosen"]
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


def test_an_unknown_suite_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "suites"), "claims-s30", "claims-nope"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no suite claims-nope; allowed: claims-a-dir claims-a-ls" in done.stderr
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
