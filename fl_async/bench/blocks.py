"""``fl-async bench --tables FILE.md``: the generated blocks of a Markdown file, from records.

A generated block is every line from a start marker to the next end marker::

    <!-- generated from benchmarks/results/suites/a -->
    ... (the tables of every split of that records folder)
    <!-- end generated -->

``split=NAME`` after the path (``<!-- generated from benchmarks/results/suites/a
split=dirichlet -->``) keeps one split. ``generated verdict from`` gives the claims' verdicts
(several folders), ``generated claims from`` the claims table of the claims study (several
folders), ``generated tuned from`` a sweep's default and chosen points. The path is
relative to the repository root: the nearest folder above the Markdown file that holds ``.git``
or ``pyproject.toml``. Everything outside the blocks is left as it is (docs/bench.md, "Raw
results and generated tables").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fl_async.bench.claims_table import claims_lines, read_splits
from fl_async.bench.export import is_records_folder
from fl_async.bench.records import load_records
from fl_async.bench.report import sorted_records, split_tables
from fl_async.bench.runner import SUITE_FILE
from fl_async.bench.tuned_table import read_tuned, tuned_lines
from fl_async.bench.verdict import records_per_run, verdict_lines
from fl_async.files import read_json
from fl_async.validation import InvalidArgument

START = re.compile(
    r"^<!-- generated (?:(?P<verdict>verdict )|(?P<tuned>tuned )|(?P<claims>claims ))?"
    r"from (?P<source>\S+(?: \S+)*?)"
    r"(?: split=(?P<split>\S+))? -->$"
)
END = "<!-- end generated -->"


@dataclass(frozen=True)
class Block:
    """One generated block: its records folder as written, its split if one, and the indices of
    its start and end marker lines."""

    source: str
    split: str | None
    start: int
    end: int
    verdict: bool = False
    """A verdict block (the claims' rules, ``fl_async.bench.verdict``); ``source`` may then name
    several records folders, separated by spaces."""
    tuned: bool = False
    """A sweep's table: default against chosen point (``fl_async.bench.tuned_table``)."""
    claims: bool = False
    """The claims table (``fl_async.bench.claims_table``); ``source`` may name several folders."""

    @property
    def name(self) -> str:
        """The block as messages name it: its line and its marker."""
        split = f" split={self.split}" if self.split else ""
        kind = ""
        if self.verdict or self.tuned or self.claims:
            kind = "verdict " if self.verdict else "tuned " if self.tuned else "claims "
        return f"line {self.start + 1} (generated {kind}from {self.source}{split})"


def find_blocks(lines: Sequence[str]) -> list[Block]:
    """The generated blocks of a Markdown file's ``lines``; a marker out of place raises
    InvalidArgument naming its line."""
    blocks: list[Block] = []
    opened: tuple[int, re.Match[str]] | None = None
    fenced = False
    for index, line in enumerate(lines):
        text = line.strip()
        if text.startswith(("```", "~~~")):
            fenced = not fenced  # a marker quoted in a code block (docs/bench.md) is text
        if fenced or text.startswith(("```", "~~~")):
            continue
        match = START.match(text)
        if match is None and text.startswith("<!-- generated "):
            raise InvalidArgument(f"line {index + 1}: malformed marker {text!r}")
        if match is not None:
            if opened is not None:
                raise InvalidArgument(
                    f"line {index + 1}: a block starts inside the one of line {opened[0] + 1}"
                )
            opened = (index, match)
        elif text == END:
            if opened is None:
                raise InvalidArgument(f"line {index + 1}: {END!r} closes no block")
            start, found = opened
            verdict, claims = found["verdict"] is not None, found["claims"] is not None
            if not (verdict or claims) and " " in found["source"]:
                raise InvalidArgument(
                    f"line {start + 1}: one records folder per table block, got {found['source']!r}"
                )
            tuned = found["tuned"] is not None
            if (tuned or claims) and found["split"]:
                kind = "tuned" if tuned else "claims"
                raise InvalidArgument(f"line {start + 1}: a {kind} block covers every split")
            blocks.append(
                Block(found["source"], found["split"], start, index, verdict, tuned, claims)
            )
            opened = None
    if opened is not None:
        raise InvalidArgument(f"line {opened[0] + 1}: the block has no {END!r}")
    return blocks


def repository_root(markdown: Path) -> Path:
    """The nearest folder above ``markdown`` (its own included) holding ``.git`` or
    ``pyproject.toml``: block paths are relative to it."""
    start = markdown.resolve().parent
    for folder in (start, *start.parents):
        if (folder / ".git").exists() or (folder / "pyproject.toml").is_file():
            return folder
    raise InvalidArgument(f"no repository root (.git or pyproject.toml) above {markdown}")


def _records_folder(block: Block, source: str, root: Path) -> Path:
    """The records folder ``source`` of ``block`` (relative to ``root``), checked."""
    if Path(source).is_absolute():
        raise InvalidArgument(f"{block.name}: the path must be relative to the repository root")
    folder = root / source
    if not is_records_folder(folder):
        raise InvalidArgument(
            f"{block.name}: {folder} is not a records folder (made by fl-async bench --export)"
        )
    return folder


def block_lines(block: Block, root: Path) -> list[str]:
    """The lines of ``block`` as generated from its records folder(s), markers included."""
    if block.verdict:
        return _verdict_lines(block, root)
    if block.claims:
        return _claims_lines(block, root)
    if block.tuned:
        record = read_tuned(_records_folder(block, block.source, root))
        start = f"<!-- generated tuned from {block.source} -->"
        return [start, "", *tuned_lines(record), "", END]
    folder = _records_folder(block, block.source, root)
    records = sorted_records(load_records(folder))
    if block.split is not None and block.split not in records:
        raise InvalidArgument(
            f"{block.name}: no split {block.split!r} there; recorded: {', '.join(records)}"
        )
    splits = [block.split] if block.split is not None else list(records)
    tables = "\n\n".join(split_tables(split, records[split]) for split in splits)
    split = f" split={block.split}" if block.split else ""
    return [f"<!-- generated from {block.source}{split} -->", "", *tables.split("\n"), "", END]


def _verdict_lines(block: Block, root: Path) -> list[str]:
    folders = []
    for source in block.source.split(" "):
        per_split = records_per_run(load_records(_records_folder(block, source, root)))
        if block.split is not None:
            if block.split not in per_split:
                raise InvalidArgument(
                    f"{block.name}: no split {block.split!r} in {source}; recorded: "
                    f"{', '.join(per_split)}"
                )
            per_split = {block.split: per_split[block.split]}
        folders.append((Path(source).name, per_split))
    split = f" split={block.split}" if block.split else ""
    start = f"<!-- generated verdict from {block.source}{split} -->"
    return [start, "", *verdict_lines(folders), "", END]


def _claims_lines(block: Block, root: Path) -> list[str]:
    splits = []
    for source in block.source.split(" "):
        folder = _records_folder(block, source, root)
        planned = read_json(folder / SUITE_FILE, "a records folder's suite.json").get("settings")
        splits += read_splits(Path(source).name, load_records(folder), planned)
    start = f"<!-- generated claims from {block.source} -->"
    return [start, "", *claims_lines(splits), "", END]


def generate(text: str, root: Path) -> tuple[str, list[Block], list[Block]]:
    """``text`` with every generated block made again from its records folder (paths relative
    to ``root``); also every block and those whose text changed."""
    lines = text.split("\n")
    blocks = find_blocks(lines)
    made: list[str] = []
    changed = []
    done = 0
    for block in blocks:
        new = block_lines(block, root)
        if lines[block.start : block.end + 1] != new:
            changed.append(block)
        made += lines[done : block.start] + new
        done = block.end + 1
    made += lines[done:]
    return "\n".join(made), blocks, changed


def rewrite_tables(markdown: Path, check: bool = False) -> tuple[list[Block], list[Block]]:
    """Regenerate every block of the Markdown file ``markdown`` (``check``: write nothing);
    every block and those that differed from what their records give."""
    if not markdown.is_file():
        raise InvalidArgument(f"no Markdown file {markdown}")
    text = markdown.read_text()
    try:
        made, blocks, changed = generate(text, repository_root(markdown))
    except InvalidArgument as error:
        raise InvalidArgument(f"{markdown}: {error}") from error
    if changed and not check:
        markdown.write_text(made)
    return blocks, changed
