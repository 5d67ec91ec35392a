"""``fl-async data download femnist`` at the ``huggingface_hub.snapshot_download`` boundary: a
stand-in records how it is called and answers as the Hub would (a snapshot of parquet files, or its
errors)."""

from __future__ import annotations

from pathlib import Path

import datasets
import httpx
import huggingface_hub
import pytest
from data_download import (
    _no_waiting,  # noqa: F401  (autouse: no wait between download attempts)
)
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

from fl_async.data.download import DownloadError, download, ensure, is_present


class FakeHub:
    """Stands in for ``huggingface_hub.snapshot_download``: a snapshot folder in the Hub cache's
    layout once a download succeeded; ``outcomes`` are what the next downloads raise."""

    def __init__(self, cache: Path, outcomes: list[Exception | None]) -> None:
        self.cache = cache
        self.outcomes = outcomes
        self.calls: list[tuple[str, dict]] = []
        self.snapshot: Path | None = None

    def __call__(self, repo_id: str, **kwargs) -> str:
        self.calls.append((repo_id, kwargs))
        if kwargs["local_files_only"]:
            if self.snapshot is None:
                raise LocalEntryNotFoundError("not in the cache")
            return str(self.snapshot)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        folder = Path(kwargs["cache_dir"]) / "datasets--flwrlabs--femnist" / "snapshots" / "c0"
        (folder / "data").mkdir(parents=True)
        table = datasets.Dataset.from_dict({"character": list(range(12)), "writer_id": ["w"] * 12})
        table.to_parquet(folder / "data" / "train-00000-of-00001.parquet")
        self.snapshot = folder
        return str(folder)

    def downloads(self) -> list[tuple[str, dict]]:
        return [call for call in self.calls if not call[1]["local_files_only"]]


@pytest.fixture
def hub(monkeypatch, tmp_path):
    fake = FakeHub(tmp_path / "hub", [])
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return fake


def test_femnist_is_a_dataset_snapshot_in_the_hub_cache_under_the_root(hub, tmp_path):
    fetched = download("femnist", root=hub.cache)
    [(repo_id, kwargs)] = hub.downloads()
    assert repo_id == "flwrlabs/femnist"
    assert kwargs["repo_type"] == "dataset" and kwargs["cache_dir"] == str(hub.cache)
    assert fetched.location == hub.snapshot and fetched.examples == 12
    assert fetched.detail == "12 train" and fetched.size > 0
    again = download("femnist", root=hub.cache)
    assert again.already_present and len(hub.downloads()) == 1


def test_femnist_retries_when_the_hub_cannot_be_reached(hub):
    hub.outcomes = [LocalEntryNotFoundError("connection error")]
    lines = []
    fetched = download("femnist", root=hub.cache, report=lines.append)
    assert len(hub.downloads()) == 2 and fetched.examples == 12
    assert len(lines) == 1
    assert "attempt 1 of 3 failed: the Hugging Face Hub could not be reached" in lines[0]


def test_femnist_a_truncated_or_corrupt_file_is_reported_and_retried_and_never_read(hub):
    """huggingface_hub checks each file's size and hash as it lands and raises OSError
    ("Consistency check failed") for a truncated or corrupt one, keeping the bytes in an
    ``.incomplete`` blob that no snapshot links; our fetch reports it and tries again."""
    blobs = hub.cache / "datasets--flwrlabs--femnist" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "0123.incomplete").write_bytes(b"PAR1 half a parquet file")
    hub.outcomes = [
        OSError("Consistency check failed: file should be of size 200700000 but has size 1024"),
        OSError("Consistency check failed: file sha256 does not match"),
    ]
    assert not is_present("femnist", root=hub.cache)  # the partial blob is never read
    lines = []
    fetched = download("femnist", root=hub.cache, report=lines.append, retry_wait=0)
    assert len(hub.downloads()) == 3 and fetched.examples == 12
    assert len(lines) == 2 and all("Consistency check failed" in line for line in lines)
    assert "attempt 1 of 3 failed" in lines[0] and "attempt 2 of 3 failed" in lines[1]


def test_femnist_gives_up_at_once_when_retrying_cannot_help(hub, monkeypatch):
    request = httpx.Request("GET", "https://huggingface.co/api/datasets/flwrlabs/femnist")
    missing = RepositoryNotFoundError("404", response=httpx.Response(404, request=request))
    hub.outcomes = [missing]
    with pytest.raises(DownloadError, match="femnist: download failed: no dataset") as error:
        download("femnist", root=hub.cache)
    assert "after" not in str(error.value) and len(hub.downloads()) == 1

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE is set in the environment"):
        download("femnist", root=hub.cache)
    assert len(hub.downloads()) == 1  # never called online


def test_ensure_leaves_local_paths_and_present_data_alone(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my" / "parquet").mkdir(parents=True)  # reads as owner/name, but is a folder
    assert ensure("my/parquet", root=hub.cache) is None
    assert ensure("mnist") is None and ensure(f"imagefolder:{tmp_path}") is None
    assert hub.downloads() == []
    fetched = ensure("femnist", root=hub.cache)
    assert fetched is not None and fetched.examples == 12
    assert ensure("femnist", root=hub.cache) is None and len(hub.downloads()) == 1
