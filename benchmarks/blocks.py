"""The generated blocks of benchmarks/RESULTS.md and benchmarks/PERFORMANCE.md, and the
hyperparameter tables of docs/running.md and docs/strategies.md, made again from what they are
made from: one mechanism for every file.

Run by hand after adding a result, a records folder or a rule's declaration::

    python benchmarks/blocks.py benchmarks/PERFORMANCE.md benchmarks/RESULTS.md
    python benchmarks/blocks.py docs/running.md docs/strategies.md

rewrites every block and nothing else. A block runs from its start marker to its end marker:

- ``<!-- measured from benchmarks/results/measured/FILE -->`` to ``<!-- end measured -->``: the
  table of a measured result (its ``benchmark`` field picks the module of ``benchmarks/tables/``
  whose ``BENCHMARK`` it is);
- ``<!-- generated [verdict |claims |tuned ]from FOLDER ... [split=NAME] -->`` to
  ``<!-- end generated -->``: tables made from records folders (``claims/records_blocks.py``);
- ``<!-- declared TABLE -->`` to ``<!-- end declared -->``: a table of every rule's declared
  hyperparameters (``fl_async.hyperparameters.tables.TABLES``: ``run-config``, ``presets``).

Paths are relative to the repository root; a marker quoted in a fenced code block is text.
``--check`` writes nothing and exits 1 naming each block that differs from what it is made from
(``tests/test_measured_tables.py`` and ``tests/test_claims_blocks.py`` run it on the benchmarks'
files, ``tests/test_hyperparameter_docs.py`` on the docs');
a bad block exits 2 naming its file and line.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from fl_async.hyperparameters import DECLARATIONS
from fl_async.hyperparameters.tables import table
from fl_async.validation import InvalidArgument

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN = re.compile(r"^<!-- measured from (benchmarks/results/measured/[\w.-]+\.json) -->$")
END = "<!-- end measured -->"
MEASURED = "measured"
DECLARED_BEGIN = re.compile(r"^<!-- declared ([\w-]+) -->$")
DECLARED_END = "<!-- end declared -->"
DECLARED = "declared"
PACKAGE = "fl_async_benchmark_tables"
"""The name ``tables/`` is imported under (by path, so that no other ``tables`` can shadow it)."""


class BlockError(InvalidArgument):
    """A block that cannot be generated (the message names the file and line)."""


def load_package(folder: Path, package: str) -> ModuleType:
    """The package in ``folder`` imported by path as ``package`` (its modules import one
    another relatively)."""
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)
    return module


def load_renderers(
    folder: Path = HERE / "tables", package: str = PACKAGE
) -> dict[str, Callable[[dict], str]]:
    """The table of every benchmark kind, from the modules of ``folder`` imported as ``package``."""
    return load_package(folder, package).renderers()


def _records_blocks() -> ModuleType:
    """``claims/records_blocks.py``, under the package name ``claims`` that the benchmarks'
    scripts import it by (imported once)."""
    if "claims" not in sys.modules:
        load_package(HERE / "claims", "claims")
    return importlib.import_module("claims.records_blocks")


RENDERERS = load_renderers()
RECORDS = _records_blocks()


@dataclass(frozen=True)
class Block:
    """One generated block: its kind, what it is made from, its split if one, and the indices of
    its start and end marker lines."""

    kind: str
    """``measured``, ``declared``, or a kind of ``claims/records_blocks.py``."""
    source: str
    """A measured result's path, a declared table's name, or the records folder(s), separated
    by spaces."""
    split: str | None
    start: int
    end: int

    @property
    def marker(self) -> str:
        """The block's start marker, as it is written."""
        if self.kind == MEASURED:
            return f"<!-- measured from {self.source} -->"
        if self.kind == DECLARED:
            return f"<!-- declared {self.source} -->"
        return RECORDS.marker(self.kind, self.source, self.split)

    @property
    def end_marker(self) -> str:
        """The block's end marker."""
        return _end_of(self.kind)

    @property
    def name(self) -> str:
        """The block as messages name it: its line and its marker."""
        return f"line {self.start + 1} ({self.marker[5:-4]})"


def _started(text: str) -> tuple[str, str, str | None] | None:
    """The kind, source and split of the block that the line ``text`` starts, if it does;
    InvalidArgument for a marker out of shape."""
    measured = BEGIN.match(text)
    if measured is not None:
        return MEASURED, measured.group(1), None
    declared = DECLARED_BEGIN.match(text)
    if declared is not None:
        return DECLARED, declared.group(1), None
    found = RECORDS.START.match(text)
    if found is not None:
        return RECORDS.kind_of(found), found["source"], found["split"]
    if text.startswith(("<!-- generated ", "<!-- measured ", "<!-- declared ")):
        raise InvalidArgument(f"malformed marker {text!r}")
    return None


def find_blocks(lines: Sequence[str], name: str = "<text>") -> list[Block]:
    """The generated blocks of a Markdown file's ``lines``; a marker out of place raises
    BlockError naming ``name`` and its line."""
    blocks: list[Block] = []
    opened: tuple[int, tuple[str, str, str | None]] | None = None
    fenced = False
    for index, line in enumerate(lines):
        text = line.strip()
        if text.startswith(("```", "~~~")):
            fenced = not fenced  # a marker quoted in a code block (docs/bench.md) is text
        if fenced or text.startswith(("```", "~~~")):
            continue
        try:
            started = _started(text)
        except InvalidArgument as error:
            raise BlockError(f"{name}:{index + 1}: {error}") from None
        if started is not None and opened is not None:
            raise BlockError(
                f"{name}:{index + 1}: a block starts inside the one of line {opened[0] + 1}"
            )
        if started is not None:
            opened = (index, started)
        elif text in (END, RECORDS.END, DECLARED_END):
            if opened is None or _end_of(opened[1][0]) != text:
                raise BlockError(f"{name}:{index + 1}: {text!r} closes no block")
            blocks.append(Block(*opened[1], opened[0], index))
            opened = None
    if opened is not None:
        end = _end_of(opened[1][0])
        raise BlockError(f"{name}:{opened[0] + 1}: block without '{end}'")
    return blocks


def _end_of(kind: str) -> str:
    return {MEASURED: END, DECLARED: DECLARED_END}.get(kind, RECORDS.END)


def block_lines(block: Block, root: Path) -> list[str]:
    """The lines of ``block`` as made again from what it names (paths relative to ``root``),
    markers included."""
    if block.kind == MEASURED:
        content = _measured(block.source, root).split("\n")
    elif block.kind == DECLARED:
        content = table(block.source, DECLARATIONS).split("\n")
    else:
        content = RECORDS.content(block.kind, block.source, block.split, root)
    return [block.marker, "", *content, "", block.end_marker]


def _measured(source: str, root: Path) -> str:
    """The table of the measured result ``source``."""
    path = root / source
    if not path.is_file():
        raise InvalidArgument(f"{source} does not exist")
    result = json.loads(path.read_text(encoding="utf-8"))
    kind = result.get("benchmark")
    if kind not in RENDERERS:
        raise InvalidArgument(
            f"{source} has benchmark {kind!r}; tables exist for {sorted(RENDERERS)}"
        )
    return RENDERERS[kind](result)


def generate(
    text: str, root: Path | None = None, name: str = "<text>"
) -> tuple[str, list[Block], list[Block]]:
    """``text`` with every generated block made again (paths relative to ``root``, the
    repository by default); also every block and those whose text changed."""
    root = ROOT if root is None else root
    lines = text.split("\n")
    made: list[str] = []
    changed: list[Block] = []
    done = 0
    blocks = find_blocks(lines, name)
    for block in blocks:
        try:
            new = block_lines(block, root)
        except InvalidArgument as error:
            raise BlockError(f"{name}:{block.start + 1}: {error}") from None
        if lines[block.start : block.end + 1] != new:
            changed.append(block)
        made += lines[done : block.start] + new
        done = block.end + 1
    made += lines[done:]
    return "\n".join(made), blocks, changed


def render(text: str, *, name: str = "<text>", root: Path | None = None) -> str:
    """``text`` with every block made again from what it names."""
    return generate(text, root, name)[0]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` check) the blocks of the files; 0, 1 (stale) or 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="Markdown files to rewrite")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each stale block"
    )
    args = parser.parse_args(argv)
    stale = []
    for path in args.files:
        try:
            text = path.read_text(encoding="utf-8")
            made, blocks, changed = generate(text, name=str(path))
        except (OSError, InvalidArgument) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        for block in changed if args.check else ():
            print(f"{path}: {block.name} differs from what it is made from", file=sys.stderr)
        if changed and not args.check:
            path.write_text(made, encoding="utf-8")
        stale += [str(path)] if changed else []
        print(f"{path}: {len(changed)} of {len(blocks)} generated blocks {_done(args.check)}")
    if args.check and stale:
        print(f"stale blocks in {', '.join(stale)}: run without --check", file=sys.stderr)
        return 1
    return 0


def _done(check: bool) -> str:
    return "out of date" if check else "rewritten"


if __name__ == "__main__":
    raise SystemExit(main())
