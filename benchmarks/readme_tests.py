"""The README's test command on a fresh clone, timed step by step.

Usage::

    python benchmarks/readme_tests.py [--label TEXT] [--out DIR]

Clones this checkout's HEAD into a temporary directory and runs the README's test command there
as written: its ``&&``-joined steps one after another (make the venv, install, run pytest), each
with ``bash -c`` in the clone. pytest also gets ``--durations=15`` through ``PYTEST_ADDOPTS``
(it prints the slowest tests and changes no test), and uv a cache folder of its own, new and empty
(``UV_CACHE_DIR``), so that the install downloads everything, as on a fresh machine, whatever an
earlier install left in uv's usual cache. For each step it records the wall time and the
machine's busy CPU-seconds over every core (``/proc/stat``), so the machine should be otherwise
idle: the load average before and after is recorded too. A step's floor is its busy CPU-seconds
over the cores, the least wall time that work could take with every core busy. The result goes
to ``benchmarks/results/measured/readme-tests-<time>-<commit>.json``; its table is generated into
PERFORMANCE.md by ``benchmarks/blocks.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from process_usage import machine_busy_seconds
from scale import git_commit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SLOWEST = 15
"""How many of the slowest test phases (``--durations``) the result keeps."""
_DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)")
_SUMMARY = re.compile(r"^=* ?(\d+ passed.*?) ?=*$")


def readme_test_command(readme: Path) -> str:
    """The README's test command: the first line of the code block after "Run the tests"."""
    text = readme.read_text(encoding="utf-8")
    match = re.search(r"Run the tests:?\s*```bash\n(.+?)\n", text)
    if match is None:
        raise SystemExit(f"{readme}: no ```bash block after 'Run the tests'")
    return match.group(1).strip()


def run_step(step: str, cwd: Path, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """Run one step of the command in ``cwd``; its figures and its output (stdout and stderr)."""
    busy, started = machine_busy_seconds(), time.perf_counter()
    done = subprocess.run(["bash", "-c", step], cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, machine_busy_seconds() - busy
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"{step!r} exited with {done.returncode}:\n{output[-4000:]}")
    cores = os.cpu_count() or 1
    figures = {
        "step": step,
        "wall": round(wall, 1),
        "busy-cpu": round(cpu, 1),
        "floor": round(cpu / cores, 1),
        "cores-busy": round(cpu / wall, 2),
    }
    return figures, output


def pytest_figures(output: str) -> dict[str, Any]:
    """pytest's summary line and its slowest test phases, from its output."""
    slowest = [
        [m.group(3), m.group(2), float(m.group(1))]
        for line in output.splitlines()
        if (m := _DURATION.match(line))
    ]
    summary = [m.group(1) for line in output.splitlines() if (m := _SUMMARY.match(line.strip()))]
    return {"summary": summary[-1] if summary else None, "slowest": slowest[:SLOWEST]}


def versions(clone: Path) -> str:
    """flwr's, torch's and numpy's versions as installed in the clone's venv."""
    code = (
        "from importlib import metadata as m; "
        "print(', '.join(f'{n} {m.version(n)}' for n in ('flwr', 'torch', 'numpy')))"
    )
    done = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def measure(command: str, label: str) -> dict[str, Any]:
    """Clone HEAD, run ``command`` step by step in the clone; the result."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fl-async-readme-") as tmp:
        cache = str(Path(tmp, "uv-cache"))
        env = {**os.environ, "PYTEST_ADDOPTS": f"--durations={SLOWEST}", "UV_CACHE_DIR": cache}
        clone = Path(tmp, "clone")
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        steps, output = [], ""
        for step in command.split(" && "):
            figures, output = run_step(step, clone, env)
            steps.append(figures)
            print(f"{figures['wall']:7.1f} s  {step}", flush=True)
        tests = pytest_figures(output)
        installed = versions(clone)
    return {
        "benchmark": "readme-tests",
        "label": label,
        "commit": git_commit(ROOT),
        "date": time.strftime("%Y-%m-%d"),
        "versions": installed,
        "cpus": os.cpu_count(),
        "load": [round(load, 2), round(os.getloadavg()[0], 2)],
        "command": command,
        "steps": steps,
        "total": {
            "wall": round(sum(s["wall"] for s in steps), 1),
            "busy-cpu": round(sum(s["busy-cpu"] for s in steps), 1),
            "floor": round(sum(s["floor"] for s in steps), 1),
        },
        "pytest": tests,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure the README's test command once and write the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="", help="what this result measures (free text)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "measured")
    args = parser.parse_args(argv)
    if not Path("/proc/stat").exists():
        raise SystemExit("readme_tests.py reads /proc/stat: Linux only")
    result = measure(readme_test_command(ROOT / "README.md"), args.label)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.out / f"readme-tests-{stamp}-{result['commit']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{result['total']['wall']:.1f} s in all; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
