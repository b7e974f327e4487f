"""The task's directory, made at submission: ``<shared>/users/<user>/jobs/<task_id>/`` with
the spec as the user sent it: the API, not the driver, creates the task's directory.

Attempts write beside it (``jobs/<task_id>--aNN/``, made by the driver). A user's own
jobs can write anything under that user's home, symlinks included, so the walk from the
shared root opens every component with O_NOFOLLOW: a planted link is refused, never
followed out of the user's area.

Under a burst of submissions the directories are made a gathering at a time
(:class:`TaskDirs`): one thread hop, and one walk to each user's ``jobs`` for all of
that user's new tasks, instead of one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from argus import layout
from argus.store.gather import Gatherer

__all__ = ["SPEC_FILE", "TaskDirs", "make_task_dirs"]

SPEC_FILE = "spec.yaml"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _enter(parent_fd: int, name: str) -> int:
    """Open (making it if missing) the directory ``name`` under ``parent_fd``."""
    try:
        return os.open(name, _DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        return os.open(name, _DIR, dir_fd=parent_fd)


def _write_spec(jobs_fd: int, task_id: str, spec_raw: str) -> None:
    """``<task_id>/spec.yaml`` under the open ``jobs`` directory."""
    try:
        os.mkdir(task_id, 0o755, dir_fd=jobs_fd)
        fresh = True
    except FileExistsError:
        fresh = False  # made before (a retried call): replace the spec whole, never in place
    task_fd = os.open(task_id, _DIR, dir_fd=jobs_fd)
    try:
        # In a directory just made, nothing can be in the way: write the spec directly.
        name = SPEC_FILE if fresh else f".{SPEC_FILE}.tmp"
        fd = os.open(name, _NEW_FILE | (os.O_EXCL if fresh else os.O_TRUNC), 0o644, dir_fd=task_fd)
        try:
            data = spec_raw.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        if not fresh:
            os.replace(name, SPEC_FILE, src_dir_fd=task_fd, dst_dir_fd=task_fd)
    finally:
        os.close(task_fd)


def _open_jobs(shared_root: str | Path, user: str) -> int:
    """An fd on ``<shared>/users/<user>/jobs`` (made if missing), walked without following
    a link."""
    fd = os.open(str(shared_root), _DIR)
    try:
        for name in (layout.USERS, user, layout.JOBS):
            child = _enter(fd, name)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_task_dirs(shared_root: str | Path, user: str,
                   tasks: Sequence[tuple[str, str]]) -> list[OSError | None]:
    """Make the directory of each ``(task_id, spec_raw)`` of ``user`` and write its
    ``spec.yaml``; one outcome per task (None, or the OSError: ELOOP/ENOTDIR for a symlink
    where a directory belongs). Idempotent."""
    try:
        jobs_fd = _open_jobs(shared_root, user)
    except OSError as exc:
        return [exc] * len(tasks)
    outcomes: list[OSError | None] = []
    try:
        for task_id, spec_raw in tasks:
            try:
                _write_spec(jobs_fd, task_id, spec_raw)
                outcomes.append(None)
            except OSError as exc:
                outcomes.append(exc)
    finally:
        os.close(jobs_fd)
    return outcomes


class TaskDirs:
    """Makes task directories for concurrent submissions, a gathering at a time, in a
    thread: the shared root may be a network filesystem, and the loop serves every other
    request meanwhile."""

    def __init__(self, shared_root: str | Path) -> None:
        self.shared_root = Path(shared_root)
        self._gatherer: Gatherer[tuple[str, str, str], None] = Gatherer(self._make)

    async def make(self, user: str, task_id: str, spec_raw: str) -> OSError | None:
        """Make ``task_id``'s directory; returns the OSError that stopped it, if any."""
        try:
            await self._gatherer.put((user, task_id, spec_raw))
        except OSError as exc:
            return exc
        return None

    async def close(self) -> None:
        await self._gatherer.close()

    async def _make(self, items: list[tuple[str, str, str]]) -> list[BaseException | None]:
        return await asyncio.to_thread(self._make_all, items)

    def _make_all(self, items: list[tuple[str, str, str]]) -> list[BaseException | None]:
        by_user: dict[str, list[int]] = defaultdict(list)
        for i, (user, _, _) in enumerate(items):
            by_user[user].append(i)
        outcomes: list[BaseException | None] = [None] * len(items)
        for user, indexes in by_user.items():
            made = make_task_dirs(self.shared_root, user, [items[i][1:] for i in indexes])
            for i, outcome in zip(indexes, made):
                outcomes[i] = outcome
        return outcomes
