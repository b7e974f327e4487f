"""Telling a full disk from other storage errors, so that a write refused for lack of
space says so (the API answers 507) instead of surfacing as an unexplained error.

SQLite reports a write that found no space as ``SQLITE_FULL`` ("database or disk is
full"); where the space ran out while it grew the WAL's index or opened a file it may say
only "disk I/O error" (``SQLITE_IOERR``), and an interrupted ``write(2)`` of a file is
``ENOSPC`` (``EDQUOT`` past a quota). For those, the free space of the file's filesystem
(``os.statvfs``) settles it.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from pathlib import Path

from argus.store.errors import StorageFull

__all__ = ["LOW_SPACE_BYTES", "free_bytes", "full_disk_note", "storage_full"]

log = logging.getLogger(__name__)

# Below this many free bytes a filesystem counts as full: SQLite grows the WAL by pages
# and its index by 32 KiB, so a few hundred KiB left is as good as none for a write.
LOW_SPACE_BYTES = 1 << 20
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path`` (or
    its nearest existing parent); None when it cannot be told."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _looks_full(path: str | Path) -> bool:
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE_BYTES


def storage_full(exc: BaseException, path: str | Path) -> StorageFull | None:
    """``exc`` as a ``StorageFull`` when it was a write refused for lack of space on the
    filesystem holding ``path``; None for any other error."""
    if isinstance(exc, StorageFull):
        return exc
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        full = code == sqlite3.SQLITE_FULL or (
            code is not None and code & 0xFF == sqlite3.SQLITE_IOERR and _looks_full(path))
        if not full and code is None:  # errors raised without a code (some drivers' paths)
            full = "disk is full" in str(exc) or ("disk I/O error" in str(exc) and _looks_full(path))
    elif isinstance(exc, OSError):
        full = exc.errno in _NO_SPACE_ERRNOS
    else:
        full = False
    if not full:
        return None
    free = free_bytes(path)
    log.error("a write to %s was refused for lack of space (%s free): %s", path,
              "?" if free is None else f"{free} bytes", exc)
    return StorageFull(str(exc), free)


def full_disk_note(path: str | Path) -> str:
    """A sentence for a failure to open or migrate the database at ``path``: that its
    disk is full, when it is; else ""."""
    free = free_bytes(path)
    if free is None or free >= LOW_SPACE_BYTES:
        return ""
    folder = Path(path).parent
    return (f"the disk holding {folder} is full ({free} bytes free): free space there, "
            "then start again")
