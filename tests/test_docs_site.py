"""The documentation site (mkdocs.yml): it builds in strict mode, and its hooks do their jobs."""

import importlib.util
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", ROOT / "docs/hooks" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package whose public names are documented but for three."""
    source = '''
        """A package."""

        __all__ = ["Base", "Child", "undocumented_function", "documented_function"]


        class Base:
            """A base."""

            def documented(self) -> None:
                """Documented here."""

            def bare(self) -> None:
                pass

            def _private(self) -> None:
                pass


        class Child(Base):
            """A child."""

            def documented(self) -> None:
                pass

            def new(self) -> None:
                pass


        def undocumented_function() -> None:
            pass


        def documented_function() -> None:
            """Documented."""


        def not_exported() -> None:
            pass
    '''
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(textwrap.dedent(source))
    return tmp_path


def test_undocumented_public_names_are_found(package: Path) -> None:
    docstrings = _hook("docstrings.py")
    # Child.documented overrides a documented method; Child.bare is Base.bare, reported once.
    assert docstrings.undocumented("pkg", search_paths=[str(package)]) == [
        "pkg.Base.bare",
        "pkg.Child.new",
        "pkg.undocumented_function",
    ]
    # A directive for one class checks that class and its members (inherited ones too).
    assert docstrings.undocumented("pkg.Child", search_paths=[str(package)]) == [
        "pkg.Base.bare",
        "pkg.Child.new",
    ]


def test_an_api_page_with_an_undocumented_name_warns(
    package: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    docstrings = _hook("docstrings.py")
    monkeypatch.setattr(docstrings, "ROOT", package)
    page = SimpleNamespace(file=SimpleNamespace(src_uri="docs/api/pkg.md"))
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.docstrings"):
        docstrings.on_page_markdown("# pkg\n\n::: pkg\n", page=page, config=None, files=None)
    assert [record.getMessage() for record in caplog.records] == [
        f"docs/api/pkg.md: public name {name} has no docstring"
        for name in ("pkg.Base.bare", "pkg.Child.new", "pkg.undocumented_function")
    ]


def test_the_site_holds_the_repository_pages_at_their_paths() -> None:
    files = _hook("repo_layout.py").repository_files()
    for page in ("README.md", "docs/running.md", "docs/api/strategies.md", "benchmarks/RESULTS.md"):
        assert page in files
    assert "examples/edge-deployment/generate_certs.sh" in files
    assert not [path for path in files if path.startswith("docs/hooks/")]
    assert not [path for path in files if path.startswith("fl_async/")]


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    # Strict: a broken link or anchor, a page left out of the nav, a docstring griffe cannot
    # parse or a public name without a docstring is a warning, and a warning fails the build.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    api = (tmp_path / "docs/api/strategies/index.html").read_text()
    assert 'id="fl_async.strategies.GSGM"' in api
    assert 'id="fl_async.strategies.AsyncStrategy.start"' in api
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "benchmarks/PERFORMANCE/index.html").is_file()
