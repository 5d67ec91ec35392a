"""MkDocs hook: a public name without a docstring fails ``mkdocs build --strict``.

mkdocstrings leaves an undocumented name out of the page without a word, so this hook checks what
each API page documents (its ``::: module`` or ``::: module.Class`` lines): every name in the
module's ``__all__`` (or that class) has a docstring, and so has every public method and property
of the classes among them, inherited ones included (a page may show them), unless it overrides a
documented one of a base class. It reads the
sources with griffe, as mkdocstrings does, so nothing is imported. Each missing docstring is a
warning, which strict mode turns into a failed build.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(r"^::: *([\w.]+)", re.MULTILINE)
log = logging.getLogger("mkdocs.hooks.docstrings")


def _documented(obj: griffe.Object | griffe.Alias) -> bool:
    return obj.docstring is not None and bool(obj.docstring.value.strip())


def _inherits_docstring(cls: griffe.Class, name: str) -> bool:
    """Whether a base class documents the member ``name`` that ``cls`` overrides."""
    try:
        bases = cls.mro()
    except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return any(name in base.members and _documented(base.members[name]) for base in bases)


@functools.cache
def _package(name: str, search_paths: tuple[str, ...]) -> griffe.Object | griffe.Alias:
    """The top-level package ``name``, read once per build: every API page's directive is a
    part of it, and reading the whole package again for each page was half the build's time."""
    return griffe.load(name, search_paths=list(search_paths), resolve_aliases=True)


def undocumented(module_path: str, search_paths: Sequence[str] | None = None) -> list[str]:
    """Where each public object that ``module_path`` renders without a docstring is defined.

    The sources are read from ``search_paths``, by default the repository's root.
    """
    paths = (str(ROOT),) if search_paths is None else tuple(search_paths)
    top, _, inner = module_path.partition(".")
    loaded = _package(top, paths)
    if inner:
        loaded = loaded[inner]
    if not loaded.is_module:  # a directive for one object, e.g. ``::: package.Class``
        return sorted(set(_undocumented_objects([loaded])))
    names = loaded.exports if loaded.exports is not None else list(loaded.members)
    return sorted(set(_undocumented_objects(loaded[str(name)] for name in names)))


def _undocumented_objects(objects: Iterable[griffe.Object | griffe.Alias]) -> Iterator[str]:
    for obj in objects:
        obj = obj.final_target if obj.is_alias else obj
        if not _documented(obj):
            yield obj.path
        if obj.is_class:
            yield from _undocumented_members(obj)


def _undocumented_members(cls: griffe.Class) -> Iterator[str]:
    for name, member in cls.all_members.items():
        if name.startswith("_") or (member.is_alias and not member.inherited):
            continue  # private, or a name imported into the class body
        target = member.final_target if member.is_alias else member
        owner = target.parent  # the class that defines it: ``cls`` or a base
        is_callable = target.is_function or "property" in target.labels
        if is_callable and not _documented(target) and not _inherits_docstring(owner, name):
            yield target.path


def on_pre_build(config: MkDocsConfig) -> None:
    """Read the sources afresh for each build (``mkdocs serve`` rebuilds after an edit)."""
    _package.cache_clear()


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Warn once for every undocumented public name an API page renders."""
    for module_path in DIRECTIVE.findall(markdown):
        for name in undocumented(module_path):
            log.warning("%s: public name %s has no docstring", page.file.src_uri, name)
    return markdown
