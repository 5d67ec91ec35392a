"""Where a Hugging Face dataset's snapshot lies in the Hub cache, found without ``datasets``.

Only ``huggingface_hub`` is imported: a run's checks before it starts, ``fl-async data list``
and a missing dataset's error need no torch and no ``datasets`` (about 2.5 CPU-seconds of
imports between them), only the reading of a present one does (``fl_async.data.hf``).
"""

from __future__ import annotations

from pathlib import Path

from fl_async.data.sources import fetch_command
from fl_async.extras import require


def hub_snapshot(repo_id: str, *, root: Path | None, download: bool) -> Path:
    """The folder of ``repo_id``'s snapshot in the Hub cache (``root``, else Hugging Face's
    default), fetched first only when ``download`` is True; FileNotFoundError when it is not
    there, or only partly (an interrupted download)."""
    require("Hugging Face datasets", "huggingface_hub")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    # ``datasets.load_dataset`` would always contact the Hub; a snapshot taken with
    # ``local_files_only`` never does, so ``download=False`` really stays offline.
    cache_dir = None if root is None else str(root)
    try:
        folder = snapshot_download(
            repo_id, repo_type="dataset", cache_dir=cache_dir, local_files_only=not download
        )
    except LocalEntryNotFoundError as error:
        if download:  # the Hub could not be reached: the caller retries or reports it
            raise

        where = cache_dir or "the Hugging Face cache (HF_HUB_CACHE)"
        raise FileNotFoundError(
            f"Hugging Face dataset {repo_id!r} is not (or only partly) in {where}; fetch it "
            f"with: {fetch_command(repo_id, root)}"
        ) from error
    return Path(folder)
