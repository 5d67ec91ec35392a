"""``fl-async data``: fetch the papers' datasets (``download``) and see which are here (``list``).

Exit codes: 0 done, 1 a download failed (after its retries), 2 a bad name or option. Progress
bars go to stderr (torchvision's and huggingface_hub's own), the summary line to stdout.
"""

from __future__ import annotations

import argparse
import sys

from fl_async.data.download import (
    ATTEMPTS,
    DOWNLOADS,
    DownloadError,
    check_download_name,
    download,
    status,
)
from fl_async.data.fetched import format_size
from fl_async.data.sources import default_root
from fl_async.validation import InvalidArgument, check_int

_ROOT_HELP = (
    "the data root: torchvision's folder (default: $FL_ASYNC_DATA, else ~/.cache/fl-async) and, "
    "for Hugging Face datasets, the Hub cache (default: Hugging Face's own, HF_HUB_CACHE); "
    "the run config's data-root"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``fl-async data`` and their options."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fetch = actions.add_parser(
        "download",
        help="fetch a dataset into the data root (checked, retried, moved into place whole)",
        description="Fetch a dataset into the data root: torchvision's downloaders (md5 sums "
        "checked) for Fashion-MNIST and CIFAR, huggingface_hub for FEMNIST and Hub ids. Exit 0 "
        "done (or already present), 1 failed after its retries, 2 bad name or option.",
    )
    fetch.add_argument(
        "name",
        metavar="NAME",
        help=f"{', '.join(DOWNLOADS)}, or a Hugging Face dataset id (owner/name)",
    )
    fetch.add_argument("--root", default=None, help=_ROOT_HELP)
    fetch.add_argument(
        "--attempts",
        type=int,
        default=ATTEMPTS,
        help=f"attempts before giving up (default: {ATTEMPTS})",
    )
    listing = actions.add_parser(
        "list",
        help="each dataset: present or not under the data root, size on disk, source",
        description="Each dataset: present or not under the data root, size on disk, source.",
    )
    listing.add_argument("--root", default=None, help=_ROOT_HELP)


def run(args: argparse.Namespace) -> int:
    """Run ``fl-async data download`` or ``fl-async data list``; the exit code."""
    if args.action == "list":
        print(list_table(args.root))
        return 0
    try:
        check_download_name(args.name)
        check_int("--attempts", args.attempts, minimum=1)
    except InvalidArgument as error:
        print(f"fl-async data: error: {error}", file=sys.stderr)
        return 2
    try:
        fetched = download(args.name, root=args.root, attempts=args.attempts)
    except DownloadError as error:
        print(f"fl-async data: error: {error}", file=sys.stderr)
        return 1
    print(f"fl-async data: {fetched.summary()}")
    return 0


def list_table(root: str | None) -> str:
    """The table ``fl-async data list`` prints: one row per dataset, the data root above it."""
    rows = [("dataset", "state", "size", "source", "location")]
    for found in status(root):
        size = format_size(found.size) if found.size else "-"
        rows.append((found.name, found.state, size, found.source, found.location))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [f"data root: {default_root() if root is None else root}"]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)
