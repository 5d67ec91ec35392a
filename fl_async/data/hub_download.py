"""Datasets fetched from the Hugging Face Hub with ``huggingface_hub``'s ``snapshot_download``,
into the Hub cache the loader reads (FEMNIST and any Hub dataset id)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fl_async.data.fetched import AttemptFailed, Fetched, Status, cause, disk_size, one_line
from fl_async.data.sources import HUB_DOWNLOADS


def repo_id_of(name: str) -> str:
    """The Hub repository of ``name``: a named dataset's (e.g. FEMNIST's), else ``name`` itself."""
    return HUB_DOWNLOADS.get(name, name)


def hub_root(root: str | os.PathLike[str] | None) -> Path | None:
    """``root`` as a path, or None for the Hub's own cache (``HF_HUB_CACHE``)."""
    return None if root is None else Path(root).expanduser()


def hub_present(name: str, root: Path | None) -> Fetched | None:
    """The snapshot of ``name`` already cached under ``root``, or None (nothing is fetched)."""
    from fl_async.data.hub_cache import hub_snapshot

    try:
        folder = hub_snapshot(repo_id_of(name), root=root, download=False)
    except FileNotFoundError:
        return None
    return _hub_fetched(name, folder, already_present=True)


def fetch_hub(name: str, root: Path | None) -> Fetched:
    """One attempt of ``snapshot_download`` (it resumes what an interrupted attempt left)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from fl_async.data.hub_cache import hub_snapshot

    repo_id = repo_id_of(name)
    if constants.is_offline_mode():
        raise AttemptFailed(
            "HF_HUB_OFFLINE is set in the environment: unset it to download", final=True
        )
    try:
        folder = hub_snapshot(repo_id, root=root, download=True)
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError) as error:
        raise AttemptFailed(
            f"no dataset {repo_id!r} this machine may read on the Hugging Face Hub "
            f"({type(error).__name__})",
            final=True,
        ) from error
    except LocalEntryNotFoundError as error:
        # snapshot_download's way of saying the Hub could not be reached
        raise AttemptFailed(
            f"the Hugging Face Hub could not be reached ({cause(error)})"
        ) from error
    except OSError as error:
        raise AttemptFailed(one_line(error), final=error.errno == errno.ENOSPC) from error
    return _hub_fetched(name, folder, already_present=False)


def _hub_fetched(name: str, folder: Path, *, already_present: bool) -> Fetched:
    counts = _parquet_rows(folder)
    examples = sum(counts.values()) if counts else None
    detail = " / ".join(f"{rows:,} {split}" for split, rows in counts.items())
    return Fetched(name, folder, examples, detail, disk_size(folder), already_present)


def _parquet_rows(folder: Path) -> dict[str, int]:
    """Rows per split of a snapshot's parquet files, read from their footers (no decoding);
    the split is the file name's first word (``train-00000-of-00001.parquet``)."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    for path in sorted(folder.rglob("*.parquet")):
        split = path.name.split("-")[0].split(".")[0]
        counts[split] = counts.get(split, 0) + pq.ParquetFile(path).metadata.num_rows
    return counts


def hub_status(name: str, repo_id: str, root: Path | None) -> Status:
    """``fl-async data list``'s row for the Hub dataset ``name``: present, incomplete or absent."""
    from huggingface_hub.errors import IncompleteSnapshotError

    from fl_async.data.hub_cache import hub_snapshot

    where = str(root) if root is not None else "the Hugging Face cache (HF_HUB_CACHE)"
    source = f"Hugging Face, {repo_id}"
    try:
        folder = hub_snapshot(repo_id, root=root, download=False)
    except FileNotFoundError as error:
        state = "incomplete" if isinstance(error.__cause__, IncompleteSnapshotError) else "absent"
        return Status(name, state, 0, source, where)
    return Status(name, "present", disk_size(folder), source, str(folder))
