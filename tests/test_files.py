"""write_atomically: the one way fl-async writes the files it leaves behind."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from fl_async import files
from fl_async.files import write_atomically


def test_writes_text_and_bytes_and_creates_the_folder(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "history.json"
    assert write_atomically(target, "héllo\n") == target
    assert target.read_bytes() == "héllo\n".encode()
    write_atomically(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["history.json"]


def test_permissions_follow_the_umask_not_mkstemps_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = write_atomically(tmp_path / "f.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "checkpoint.pkl"
    target.write_bytes(b"old")

    def fail(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pkl"]


def test_concurrent_writers_never_share_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "suite.json"
    payloads = [bytes([i]) * 100_000 for i in range(8)]
    errors: list[BaseException] = []

    def write(payload: bytes) -> None:
        try:
            for _ in range(20):
                write_atomically(target, payload)
        except BaseException as error:  # collected: the assertion below names it
            errors.append(error)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in payloads  # whole: one writer's bytes, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["suite.json"]
