"""The ``fl-async`` command: one subcommand per tool (``run``, ``partition``, ``bench``,
``data``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

DESCRIPTION = "fl-async: asynchronous federated learning on Flower. One subcommand per tool."

# Subcommand name -> module exposing ``add_arguments(parser)`` and ``run(args) -> int``, and the
# plain-text help shown by ``fl-async --help``. Modules are imported only when their subcommand
# runs, so ``fl-async --help`` stays fast.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "fl_async.app.launch",
        "Run the Flower App in a simulation (this machine, or a Ray cluster with --ray-address), "
        "the same as python -m fl_async.app: exit 0 when it finished, 1 when it failed or could "
        "not make progress, 2 for a bad setting.",
    ),
    "partition": ("fl_async.partitioning.cli", "Split a dataset's labels into non-IID partitions."),
    "bench": ("fl_async.bench.cli", "Run strategies side by side and report accuracy, stability."),
    "data": (
        "fl_async.data.cli",
        "Fetch the papers' datasets (download NAME) and see which are here (list): exit 0 done, "
        "1 a download failed after its retries, 2 a bad name or option.",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="fl-async", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv:
        parser.print_help(sys.stderr)  # the list of subcommands, not only "COMMAND is required"
        return 2
    if argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv)  # --help, or usage and a clear error (exit code 2)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    sub_parser = argparse.ArgumentParser(
        prog=f"fl-async {argv[0]}", description=SUBCOMMANDS[argv[0]][1]
    )
    module.add_arguments(sub_parser)
    return int(module.run(sub_parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
