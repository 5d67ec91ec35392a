"""Writing a file so that a reader, or a crash, never sees half of it.

The files a later run reads back to resume or to build tables (a run's history, the checkpoint
and its lease, bench records and suite files) go through ``write_atomically``: the bytes go to a
temporary file beside the target, are synced to disk, and the temporary file is renamed over the
target, which on POSIX replaces it in one step. Reports and plots, made again on every call, are
written directly. ``read_json`` reads such a JSON file back, refusing a damaged or foreign one
in one line.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from fl_async.validation import InvalidArgument


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


def read_json(
    path: str | os.PathLike[str], what: str, *, keys: tuple[str, ...] = (), fix: str = ""
) -> dict[str, Any]:
    """The JSON object in ``path``, a file a run wrote and reads back (``what`` names it).

    ``InvalidArgument``, one line naming the file, what is wrong and ``fix`` (what to do), when
    it cannot be read, is not JSON, is not an object or lacks one of ``keys``; never a
    traceback from deep inside a report.
    """
    target = Path(path)
    fix = fix or "delete it, or replace it with the one fl-async wrote"
    try:
        value = json.loads(target.read_bytes().decode("utf-8"), parse_constant=_no_constant)
    except OSError as error:
        raise InvalidArgument(f"{target}: cannot read this {what}: {error.strerror}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise InvalidArgument(f"{target} is not a {what} (not JSON: {reason}); {fix}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"{target} is not a {what} (a JSON {type(value).__name__}, not an object); {fix}"
        )
    missing = [key for key in keys if key not in value]
    if missing:
        raise InvalidArgument(f"{target} is not a {what} (no {', '.join(missing)}); {fix}")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
