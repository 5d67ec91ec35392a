"""The lean app copy ``flwr run`` packages: the same FAB as the app directory, without walking
virtual environments, hidden or ignored directories."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from flwr.cli.build import build_fab_from_disk

from fl_async.app.staging import app_files, staged_app

ROOT = Path(__file__).resolve().parents[1]


def _fab_names(app: Path) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(build_fab_from_disk(app))).namelist())


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_staged_copy_skips_what_flwr_run_drops_whole(tmp_path):
    _tree(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            ".gitignore": "/outputs/\n*.log\n",
            "app/main.py": "",
            "app/sub/data.json": "{}",
            "README.md": "",
            ".venv/pyvenv.cfg": "",
            ".venv/lib/site.py": "",
            ".git/config": "",
            "env2/pyvenv.cfg": "",
            "env2/lib/x.py": "",
            "outputs/run/history.json": "{}",
            "app/__pycache__/main.cpython-311.pyc": "",
            "app/run.log": "",
        },
    )
    listed = {p.as_posix() for p in app_files(tmp_path)}
    assert listed == {
        "pyproject.toml",
        ".gitignore",
        "app/main.py",
        "app/sub/data.json",
        "README.md",
    }


def test_a_negated_pattern_keeps_its_directory(tmp_path):
    _tree(
        tmp_path,
        {
            ".gitignore": "results/*\n!results/keep/\n",
            "results/keep/a.json": "",
            "results/drop/b.json": "",
            "pyproject.toml": "",
        },
    )
    listed = {p.as_posix() for p in app_files(tmp_path)}
    assert listed == {".gitignore", "pyproject.toml", "results/keep/a.json"}


def test_with_fab_include_only_the_fab_files_are_copied(tmp_path):
    pyproject = "[project]\nname = 'x'\n[tool.flwr.app]\nfab-include = ['app/**/*.py']\n"
    files = ["app/main.py", "app/sub/x.py", "app/sub/data.json", "README.md", "docs/a.md"]
    _tree(tmp_path, {"pyproject.toml": pyproject, ".gitignore": "*.log\n", "app/run.log": ""})
    _tree(tmp_path, dict.fromkeys([*files, "results/r.json"], ""))
    listed = {p.as_posix() for p in app_files(tmp_path)}
    assert listed == {"pyproject.toml", ".gitignore", "app/main.py", "app/sub/x.py"}


def test_this_repository_packages_the_same_fab_staged_or_not():
    with staged_app(ROOT) as stage:
        assert stage.exists() and (stage / "pyproject.toml").is_file()
        staged = _fab_names(stage)
    assert staged == _fab_names(ROOT)
    assert all(
        name.startswith("fl_async/") or name in ("pyproject.toml", ".info/CONTENT")
        for name in staged
    )
    assert not stage.exists()
