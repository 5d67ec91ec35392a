"""MkDocs hook: the site mirrors the repository's layout, so its relative links work as on GitHub.

The pages are the README (the home page), every Markdown file under docs/, the benchmark reports
in benchmarks/ and the examples' READMEs, each at its path in the repository
(``docs/running.md``, ``benchmarks/PERFORMANCE.md``); the examples' other files (scripts, a
``pyproject.toml``) and the sweep grids (``benchmarks/sweeps/``) are copied as they are. A link
such as ``../benchmarks/PERFORMANCE.md`` from ``docs/algorithms.md`` then resolves in the site
exactly as it does in the repository, and one that resolves in neither fails
``mkdocs build --strict``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
# What the site holds, as git pathspecs relative to the repository root.
SITE_PATHS = ("README.md", "docs", "benchmarks/*.md", "benchmarks/sweeps", "examples")
HOOKS_DIR = "docs/hooks/"  # this hook's folder: build code, not content


def repository_files() -> list[str]:
    """The site's files: tracked or new (not ignored) ones under ``SITE_PATHS``, sorted."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SITE_PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return sorted({path for path in listed if not path.startswith(HOOKS_DIR)})


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Replace the files MkDocs found under docs/ with the repository's, at their own paths."""
    docs_dir = Path(config.docs_dir).resolve()
    kept = [  # the theme's assets and generated files stay
        file
        for file in files
        if file.abs_src_path is None
        or not Path(file.abs_src_path).resolve().is_relative_to(docs_dir)
    ]
    added = [
        File(path, str(ROOT), config.site_dir, config.use_directory_urls)
        for path in repository_files()
        if (ROOT / path).is_file()
    ]
    return Files(kept + added)
