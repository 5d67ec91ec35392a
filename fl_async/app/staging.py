"""A lean copy of a Flower App directory for ``flwr run`` to package.

``flwr run <dir>`` builds the app's package (a FAB) by listing every file under ``dir`` and only
then dropping what its patterns and ``.gitignore`` exclude: in a checkout with its virtual
environment inside (``.venv``, ~50,000 files with torch), the listing alone took longer than a
short run. ``staged_app`` copies the files ``flwr run`` could package, without ever entering a
directory that it would drop whole: hidden ones (``.venv``, ``.git``, ``.flwr``), virtual
environments (a ``pyvenv.cfg`` inside), ``__pycache__``, and directories the app's ``.gitignore``
ignores (``outputs/``, ``data/``). Where the app's ``pyproject.toml`` names its FAB's files
(``[tool.flwr.app] fab-include``, as this repository does: its package's modules), only those
are copied, with ``pyproject.toml`` and ``.gitignore``: Flower keeps no other file, and the
repository's 1,700 files (its committed benchmark results among them) took seconds to copy and
as long to remove, at the start and at the end of every launch. Flower's own rules then pick the
FAB's files from the copy, as from the original, so the FAB holds the same files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pathspec

SKIPPED_NAMES = frozenset({"__pycache__", "node_modules"})
ALWAYS = frozenset({"pyproject.toml", ".gitignore"})
"""Files at the app's top that Flower reads to build the FAB whatever ``fab-include`` says."""


def app_files(app_dir: Path) -> list[Path]:
    """The files under ``app_dir`` (relative) outside the directories ``flwr run`` drops whole,
    and among ``fab-include``'s files where the app's ``pyproject.toml`` has that key."""
    ignore = _gitignore(app_dir)
    include = _fab_include(app_dir)
    found: list[Path] = []
    for top, dirs, files in os.walk(app_dir, followlinks=False):
        here = Path(top).relative_to(app_dir)
        dirs[:] = sorted(d for d in dirs if not _skipped(Path(top), here / d, ignore))
        for name in sorted(files):
            relative = here / name
            if (Path(top) / name).is_symlink() or ignore.match_file(relative.as_posix()):
                continue
            if include is None or relative.as_posix() in ALWAYS or include.match_file(relative):
                found.append(relative)
    return found


@contextlib.contextmanager
def staged_app(app_dir: Path) -> Iterator[Path]:
    """A temporary copy of ``app_dir``'s packageable files, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="fl-async-app-") as tmp:
        stage = Path(tmp, app_dir.name)
        for relative in app_files(app_dir):
            target = stage / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(app_dir / relative, target)
        yield stage


def _skipped(parent: Path, relative: Path, ignore: pathspec.PathSpec) -> bool:
    """Whether ``flwr run`` would package nothing below this directory."""
    name = relative.name
    if name.startswith(".") or name in SKIPPED_NAMES:
        return True
    path = parent / name
    if path.is_symlink() or (path / "pyvenv.cfg").exists():
        return True
    return ignore.match_file(relative.as_posix() + "/")


def _fab_include(app_dir: Path) -> pathspec.PathSpec | None:
    """The app's ``[tool.flwr.app] fab-include`` patterns (None without them, or without a
    readable ``pyproject.toml``: then every file is copied, and Flower says what is wrong)."""
    try:
        config = tomllib.loads((app_dir / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    patterns = config.get("tool", {}).get("flwr", {}).get("app", {}).get("fab-include")
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return None
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _gitignore(app_dir: Path) -> pathspec.PathSpec:
    source = app_dir / ".gitignore"
    lines = source.read_text(encoding="utf-8").splitlines() if source.is_file() else []
    return pathspec.GitIgnoreSpec.from_lines(lines)
