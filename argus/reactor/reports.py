"""The reactor's side of the drivers' reports (``argus.rayjobs.reports``): which followed
attempts' commands have exited, and how far the running ones got.

An exit is looked for when the exits folder changed: a new report is a new entry, which
changes the folder's mtime, so one ``stat`` tells whether any of the attempts exited,
however many run (``exits_changed``, polled between turns). Progress is read every
``progress_check_s`` per running attempt. Reports of attempts no longer followed are
removed (an attempt that ended by Ray's word, its driver killed, leaves its progress file:
swept every ``SWEEP_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Collection, Iterable

from argus.lifecycle import TaskState
from argus.rayjobs.reports import ExitReport, ProgressReport, attempts_dir, exits_dir, read_exit, read_progress
from projections import TaskView

__all__ = ["ReportWatch"]

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
