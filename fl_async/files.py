"""Writing a file so that a reader, or a crash, never sees half of it.

The files a later run reads back to resume or to build tables (a run's history, the checkpoint
and its lease, bench records and suite files) go through ``write_atomically``: the bytes go to a
temporary file beside the target, are synced to disk, and the temporary file is renamed over the
target, which on POSIX replaces it in one step. Reports and plots, made again on every call, are
written directly.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Replace ``path`` with ``data`` (``str`` as UTF-8) in one step; returns the path written.

    The parent folder is created. The temporary name is unique per call, so two writers of the
    same file never write into each other's temporary file (the last rename wins), and the file
    gets a plain ``open``'s permissions (the umask's), not ``tempfile.mkstemp``'s 0600. On any
    error the temporary file is removed and the target is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "xb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target
