"""Tables of the measured benchmarks, generated from their committed results.

Run by hand after adding a result under ``benchmarks/results/measured/``::

    python benchmarks/measured_tables.py benchmarks/PERFORMANCE.md benchmarks/RESULTS.md

rewrites each block from a line ``<!-- measured from benchmarks/results/measured/FILE -->`` to
``<!-- end measured -->`` with the table of FILE (its ``benchmark`` field picks the module of
``benchmarks/tables/`` whose ``BENCHMARK`` it is), and nothing else. ``--check`` changes nothing
and exits 1 when a file would change (``tests/test_measured_tables.py`` runs it on both files).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN = re.compile(r"^<!-- measured from (benchmarks/results/measured/[\w.-]+\.json) -->$")
END = "<!-- end measured -->"
PACKAGE = "fl_async_benchmark_tables"
"""The name ``tables/`` is imported under (by path, so that no other ``tables`` can shadow it)."""


class BlockError(ValueError):
    """A block that cannot be generated (the message names the file and line)."""


def load_renderers(
    folder: Path = HERE / "tables", package: str = PACKAGE
) -> dict[str, Callable[[dict], str]]:
    """The table of every benchmark kind, from the modules of ``folder`` imported as ``package``."""
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)
    return module.renderers()


RENDERERS = load_renderers()


def render(text: str, *, name: str = "<text>", root: Path | None = None) -> str:
    """``text`` with every measured block regenerated from the file it names (paths are taken
    from ``root``, the repository by default)."""
    root = ROOT if root is None else root
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        match = BEGIN.match(line.strip())
        i += 1
        if not match:
            continue
        where = f"{name}:{i}"
        try:
            end = lines.index(END, i)
        except ValueError:
            raise BlockError(f"{where}: block without '{END}'") from None
        path = root / match.group(1)
        if not path.is_file():
            raise BlockError(f"{where}: {match.group(1)} does not exist")
        result = json.loads(path.read_text(encoding="utf-8"))
        kind = result.get("benchmark")
        if kind not in RENDERERS:
            raise BlockError(
                f"{where}: {match.group(1)} has benchmark {kind!r}; tables exist for "
                f"{sorted(RENDERERS)}"
            )
        out += ["", RENDERERS[kind](result), "", END]
        i = end + 1
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="Markdown files to rewrite")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        try:
            new = render(text, name=str(path))
        except BlockError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(str(path))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale tables in {', '.join(stale)}: run without --check", file=sys.stderr)
        return 1
    print(("up to date: " if not stale else "rewrote: ") + ", ".join(stale or map(str, args.files)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
