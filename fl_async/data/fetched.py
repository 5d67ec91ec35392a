"""What a download attempt gives back (``Fetched``, a ``Status`` row, or ``AttemptFailed``) and
the small helpers both downloaders share (sizes on disk, errors in one line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Fetched:
    """A dataset on disk after ``download``: where, how much, and whether it was there already."""

    name: str
    location: Path
    examples: int | None
    """Examples over every split (None when the files do not say without being decoded)."""
    detail: str
    """How the examples split, e.g. ``50,000 train / 10,000 test``."""
    size: int
    """Bytes on disk."""
    already_present: bool

    def summary(self) -> str:
        """One line: the dataset, its examples, its size and where it is."""
        count = "" if self.examples is None else f"{self.examples:,} examples ({self.detail}), "
        state = "already present" if self.already_present else "downloaded"
        return f"{self.name} {state}: {count}{format_size(self.size)} in {self.location}"


@dataclass(frozen=True)
class Status:
    """One row of ``fl-async data list``."""

    name: str
    state: str
    """``embedded``, ``present``, ``incomplete`` or ``absent``."""
    size: int
    """Bytes on disk (0 when absent)."""
    source: str
    location: str


def format_size(size: int) -> str:
    """``size`` bytes in decimal units (as tqdm's progress bars count them)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable: GB ends the loop")


class AttemptFailed(Exception):
    """One failed attempt, with its reason in one line; ``final`` when retrying cannot help."""

    def __init__(self, reason: str, *, final: bool = False) -> None:
        super().__init__(reason)
        self.final = final


def disk_size(path: Path) -> int:
    """Bytes of the files at or under ``path``; a Hub snapshot's links count as their blobs."""
    if path.is_file():
        return path.stat().st_size
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def cause(error: BaseException) -> str:
    """The error behind ``error`` (its ``__cause__``, else itself): type and message, one line."""
    behind = error.__cause__ or error
    return f"{type(behind).__name__}: {one_line(behind)}"


def one_line(error: BaseException) -> str:
    """``error``'s message on one line, without a final period (its type's name when empty)."""
    return " ".join(str(error).split()).rstrip(".") or type(error).__name__
