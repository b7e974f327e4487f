"""The task's directory, made at submission: ``<shared>/users/<user>/jobs/<task_id>/`` with
the spec as the user sent it (seed 002's "the API creates the task directory").

Attempts write beside it (``jobs/<task_id>--aNN/``, made by the driver). A user's own
jobs can write anything under that user's home, symlinks included, so the walk from the
shared root opens every component with O_NOFOLLOW: a planted link is refused, never
followed out of the user's area.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["SPEC_FILE", "make_task_dir"]

SPEC_FILE = "spec.yaml"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _enter(parent_fd: int, name: str) -> int:
    """Open (making it if missing) the directory ``name`` under ``parent_fd``."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    return os.open(name, _DIR, dir_fd=parent_fd)


def make_task_dir(shared_root: str | Path, user: str, task_id: str, spec_raw: str) -> Path:
    """Make the task directory and write ``spec.yaml``; raises OSError (ELOOP/ENOTDIR for
    a symlink where a directory belongs). Idempotent."""
    fds = [os.open(str(shared_root), _DIR)]
    try:
        for name in ("users", user, "jobs", task_id):
            fds.append(_enter(fds[-1], name))
        tmp = f".{SPEC_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=fds[-1])
        with os.fdopen(fd, "wb") as f:
            f.write(spec_raw.encode())
        os.replace(tmp, SPEC_FILE, src_dir_fd=fds[-1], dst_dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)
    return Path(shared_root) / "users" / user / "jobs" / task_id
