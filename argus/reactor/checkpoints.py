"""Which running attempts saved a checkpoint that a resume can use, and when.

verl (and the example trainer) write ``global_step_<N>/`` under ``trainer.default_local_dir``
and then ``latest_checkpointed_iteration.txt`` holding ``N``: what ``resume_mode=auto``
starts from. Argus runs each attempt in its job dir, so that folder is ``checkpoints/``
there (the toy trainer's default) or ``checkpoints/<project>/<experiment>/`` (verl's).

A job writes whatever it likes in its job dir, links included, so the look is bounded and
never follows a link (``argus.safefs``): at most ``MAX_DEPTH`` folders down, ``MAX_ENTRIES``
entries a folder, ``MAX_OPEN`` folders a level, ``MAX_TRACKER_BYTES`` read of a tracker; a
FIFO or a link is skipped. The
tracker's time is the job's to set, so it is kept between the attempt's start and the
moment it was looked at: a job can make its checkpoint look no older than its start, which
is what a job that never saves gets anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from argus import layout, safefs
from argus.lifecycle import TaskState
from projections import TaskView

__all__ = ["CheckpointWatch", "Found", "find_checkpoint"]

TRACKER = "latest_checkpointed_iteration.txt"
CHECKPOINTS = "checkpoints"
MAX_DEPTH = 2  # checkpoints/, then <project>/, then <experiment>/
MAX_ENTRIES = 64  # entries looked at in one folder
MAX_OPEN = 32  # folders opened a level below checkpoints/: a job's folder tree costs the reactor no more
MAX_TRACKER_BYTES = 32
MAX_LOOKS_PER_TURN = 256  # attempts looked at in one turn (the rest at the next)


class Found(NamedTuple):
    """A checkpoint a resume can start from: ``step``, in ``folder`` (relative to the job
    dir), the tracker last written at ``mtime``."""

    step: int
    folder: str
    mtime: float


def find_checkpoint(shared_root: str, user: str, submission_id: str) -> Found | None:
    """The newest resumable checkpoint under the attempt's ``checkpoints/`` (None: none, or
    not looked at: a link on the way, a missing folder). Walked from ``<shared>/users``,
    which the operator owns: the user's home, ``jobs`` and the job dir may be links."""
    try:
        top, _ = safefs.walk(Path(layout.users_dir(shared_root)), [user, layout.JOBS, submission_id, CHECKPOINTS])
    except safefs.Refused:
        return None
    best: Found | None = None
    level: list[tuple[int, str]] = [(top, CHECKPOINTS)]
    try:
        for depth in range(MAX_DEPTH + 1):
            below: list[tuple[int, str]] = []
            for fd, folder in level:
                room = MAX_OPEN - len(below) if depth < MAX_DEPTH else 0
                found, subdirs = _look(fd, folder, room)
                if found is not None and (best is None or found.mtime > best.mtime):
                    best = found
                below.extend(subdirs)
            for fd, _ in level:
                os.close(fd)
            level = below
    finally:
        for fd, _ in level:
            with contextlib.suppress(OSError):
                os.close(fd)
    return best


def _look(fd: int, folder: str, room: int) -> tuple[Found | None, list[tuple[int, str]]]:
    """The tracker in folder ``fd`` (by name: however many ``global_step_*`` are beside it),
    and up to ``room`` of its subfolders opened (without following links), of its first
    ``MAX_ENTRIES`` entries."""
    found = _tracker(fd, folder)
    subdirs: list[tuple[int, str]] = []
    if room <= 0:
        return found, subdirs
    with os.scandir(fd) as entries:
        for n, entry in enumerate(entries):
            if n >= MAX_ENTRIES or len(subdirs) >= room:
                break
            if not entry.name.startswith("global_step_") and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    subdirs.append((os.open(entry.name, safefs.DIR_FLAGS, dir_fd=fd), f"{folder}/{entry.name}"))
    return found, subdirs


def _tracker(dir_fd: int, folder: str) -> Found | None:
    try:
        fd = os.open(TRACKER, safefs.FILE_FLAGS, dir_fd=dir_fd)
    except OSError:  # none here, or a link (ELOOP: never followed)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        text = os.read(fd, MAX_TRACKER_BYTES).strip()
    finally:
        os.close(fd)
    if not text.isdigit() or len(text) > 12:
        return None
    step = int(text)
    try:  # verl resumes from global_step_<step>/: without it the tracker is no checkpoint
        if not stat.S_ISDIR(os.stat(f"global_step_{step}", dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return None
    except OSError:
        return None
    return Found(step=step, folder=folder, mtime=st.st_mtime)


class CheckpointWatch:
    """Looks for each running attempt's checkpoint every ``every_s`` seconds (0: never)."""

    def __init__(self, shared_root: str, every_s: float, clock: Callable[[], float]) -> None:
        self.shared_root, self.every_s, self.clock = shared_root, every_s, clock
        self._looked: dict[str, float] = {}  # submission id -> when last looked at

    async def found(self, active: Iterable[TaskView]) -> dict[str, Found]:
        """The newest checkpoint of each of ``active``'s running attempts that is due a
        look (by submission id); which are news is the turn's to decide."""
        if self.every_s <= 0:
            return {}
        now = self.clock()
        active = list(active)
        due = [t for t in active if t.state is TaskState.RUNNING and t.latest_attempt is not None
               and now - self._looked.get(t.latest_attempt.submission_id, -1e18) >= self.every_s]
        due = due[:MAX_LOOKS_PER_TURN]
        if not due:
            return {}
        running = {t.latest_attempt.submission_id for t in active if t.latest_attempt is not None}
        self._looked = {sid: at for sid, at in self._looked.items() if sid in running}
        looks = [(t.user, t.latest_attempt.submission_id) for t in due if t.latest_attempt is not None]
        hits = await asyncio.to_thread(lambda: [find_checkpoint(self.shared_root, u, s) for u, s in looks])
        for _, sid in looks:
            self._looked[sid] = now
        return {sid: hit for (_, sid), hit in zip(looks, hits) if hit is not None}
