"""The reactor's side of the drivers' reports (``argus.rayjobs.reports``): which followed
attempts' commands have exited, and how far the running ones got.

An exit is looked for when the exits folder changed: a new report is a new entry, which
changes the folder's mtime, so one ``stat`` tells whether any of the attempts exited,
however many run (``exits_changed``). Between turns the reactor is woken by the kernel
when an entry appears there (inotify, ``ExitNotifier``: no cost while nothing happens),
or, where inotify is not to be had, by a ``stat`` every ``exit_watch_s``. inotify sees
only what this host writes: on a shared filesystem across hosts a driver elsewhere is seen
at the next poll, as before. Progress is read every
``progress_check_s`` per running attempt. Reports of attempts no longer followed are
removed (an attempt that ended by Ray's word, its driver killed, leaves its progress file:
swept every ``SWEEP_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Collection, Iterable

from argus.lifecycle import TaskState
from argus.rayjobs.reports import ExitReport, ProgressReport, attempts_dir, exits_dir, read_exit, read_progress
from projections import TaskView

__all__ = ["ExitNotifier", "ReportWatch"]

SWEEP_S = 600.0
MAX_NAMES = 100_000  # entries looked at in a reports folder
MAX_READS_PER_TURN = 256


class ReportWatch:
    """Exit and progress reports of the attempts the reactor follows."""

    def __init__(self, shared_root: str, progress_every_s: float, clock: Callable[[], float]) -> None:
        self.shared_root, self.progress_every_s, self.clock = shared_root, progress_every_s, clock
        self._exits = exits_dir(shared_root)
        self._progress = attempts_dir(shared_root) / "progress"
        self._scanned_mtime: int | None = -1
        self._exited: set[str] = set()  # submission ids with an exit report
        self._read_at: dict[str, float] = {}  # submission id -> progress last read
        self._swept_at = clock()

    def _mtime(self) -> int | None:
        try:
            return os.stat(self._exits).st_mtime_ns
        except OSError:
            return None

    def exits_changed(self) -> bool:
        """A report may have come since the last look (one stat)."""
        return self._mtime() != self._scanned_mtime

    async def exits(self, followed: Collection[str]) -> dict[str, ExitReport]:
        """The exit reports of ``followed`` (submission ids); the folder is listed again only
        when it changed, and reports of attempts not followed are removed."""
        if self.exits_changed():
            self._scanned_mtime = self._mtime()
            self._exited = await asyncio.to_thread(_names, self._exits)
        stale = self._exited - set(followed)
        if stale:  # ended (or never ours): their progress goes with them
            await asyncio.to_thread(_remove, (self._exits, self._progress), stale)
            self._exited -= stale
        due = [sid for sid in followed if sid in self._exited][:MAX_READS_PER_TURN]
        if not due:
            return {}
        found = await asyncio.to_thread(lambda: [read_exit(self.shared_root, sid) for sid in due])
        return {sid: report for sid, report in zip(due, found) if report is not None}

    async def progress(self, active: Iterable[TaskView]) -> dict[str, ProgressReport]:
        """The progress reports of the running attempts due a read (every ``progress_every_s``)."""
        if self.progress_every_s <= 0:
            return {}
        now = self.clock()
        running = [t.attempts[-1].submission_id for t in active if t.state is TaskState.RUNNING and t.attempts]
        due = [sid for sid in running if now - self._read_at.get(sid, -1e18) >= self.progress_every_s]
        due = due[:MAX_READS_PER_TURN]
        keep = set(running)
        self._read_at = {sid: at for sid, at in self._read_at.items() if sid in keep}
        if now - self._swept_at >= SWEEP_S:
            self._swept_at = now
            await asyncio.to_thread(lambda: _remove((self._progress,), _names(self._progress) - keep))
        if not due:
            return {}
        found = await asyncio.to_thread(lambda: [read_progress(self.shared_root, sid) for sid in due])
        for sid in due:
            self._read_at[sid] = now
        return {sid: report for sid, report in zip(due, found) if report is not None}


def _names(folder: os.PathLike[str]) -> set[str]:
    """Submission ids of the reports in ``folder`` (the first ``MAX_NAMES``)."""
    out: set[str] = set()
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_NAMES:
                    break
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    out.add(entry.name[:-5])
    except OSError:
        pass
    return out


def _remove(folders: Iterable[os.PathLike[str]], sids: Iterable[str]) -> None:
    for sid in sids:
        for folder in folders:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, f"{sid}.json"))


_IN_MOVED_TO, _IN_CREATE = 0x80, 0x100
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


class ExitNotifier:
    """Sets ``event`` when an entry appears in the exits folder (Linux inotify, read on the
    event loop). ``open`` gives None where inotify is not to be had."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self.fd, self.loop, self.event = fd, loop, asyncio.Event()
        loop.add_reader(fd, self._read)

    @classmethod
    def open(cls, shared_root: str, loop: asyncio.AbstractEventLoop) -> "ExitNotifier | None":
        if not sys.platform.startswith("linux"):
            return None
        folder = exits_dir(shared_root)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(folder), _IN_CREATE | _IN_MOVED_TO) < 0:
                os.close(fd)
                return None
        except (OSError, AttributeError):
            return None
        return cls(fd, loop)

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.fd, 4096):  # drained: what came is known by the folder's listing
                pass
        self.event.set()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)
