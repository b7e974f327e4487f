"""An attempt's output, kept within its budget: what the job's driver does with every byte
its command prints.

The budget (``OutputLimits.budget_bytes``, the admin's ``v2.output.budget_bytes`` or the
spec's ``output_budget`` within ``v2.output.max_budget_bytes``) is split in two halves:

- the **head**: the first half of the output, written to ``driver.log`` as it comes. An
  attempt that prints less than the whole budget keeps everything there, as before;
- the **rolling tail**: past the head, the output goes to ``driver.log.tail`` and, each
  time that file reaches a quarter of the tail's half, the file is renamed to
  ``driver.log.tail.1`` (``.1`` to ``.2``, … up to ``.4``; the oldest is removed). So the
  last half-budget of output is always on disk, and the tail files never hold more than
  five quarters of it.

When the command ends, the kept tail is appended to ``driver.log`` after a line saying how
many bytes were dropped between the head and the tail, and the tail files are removed:
``driver.log`` is then at most the budget plus a few lines. On disk while the command
runs: at most the budget and an eighth of it; while the tail is folded in (one piece
copied before its file is removed), a budget and a quarter; plus those lines.

Ray's job log (``job-driver-<id>.log``, where Ray's job supervisor writes the driver's
stdout) gets a much smaller copy (``ray_copy_bytes``): the first half of it as the output
comes, and the last half when the command ends. That is what ``ray job logs`` shows, and
what the reactor reads the end of to classify a failure.
"""

from __future__ import annotations

import collections
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

import msgspec

from argus.rayjobs.reports import OutputSummary
from argus.taskspec.sizes import format_bytes

__all__ = ["DEFAULT_BUDGET", "OutputLimits", "BoundedOutput"]

DEFAULT_BUDGET = 1 << 30
TAIL_PIECES = 4  # the rolling tail's files hold a quarter of the tail each, and one more


class OutputLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How much of an attempt's output is kept (see the module docstring)."""

    budget_bytes: int = DEFAULT_BUDGET
    ray_copy_bytes: int = 1 << 20  # what Ray's job log gets: half from the start, half from the end
    stop_over: bool = False  # stop the command once its output passed the budget


def _open_log(path: Path) -> BinaryIO:
    """``driver.log`` for appending, never through a link a job left in its place."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if not path.is_symlink():
            raise
        path.unlink()
        fd = os.open(path, flags, 0o644)
    return os.fdopen(fd, "ab", buffering=0)


class BoundedOutput:
    """Writes a command's output to ``driver.log`` (head, rolling tail) and its small copy
    to ``out`` (Ray's job log). Feed it chunks; ``close`` when the command ended."""

    def __init__(self, folder: Path, limits: OutputLimits, out: BinaryIO) -> None:
        self.folder, self.limits, self.out = folder, limits, out
        self.head_bytes = limits.budget_bytes - limits.budget_bytes // 2
        self.tail_bytes = limits.budget_bytes // 2
        self.piece_bytes = max(1, self.tail_bytes // TAIL_PIECES)
        self.total = 0  # bytes the command printed
        self.log = _open_log(folder / "driver.log")
        self._tail: BinaryIO | None = None
        self._made: set[tuple[int, int]] = set()  # the tail files this driver created
        self._tail_size = 0
        self._copied = 0  # bytes of the output that Ray's copy got as they came
        self._copy_head = limits.ray_copy_bytes - limits.ray_copy_bytes // 2
        self._copy_tail: collections.deque[bytes] = collections.deque()
        self._copy_tail_size = 0
        self.stopped_at: float | None = None  # when the driver stopped the command for its output

    # -- what the reports say ---------------------------------------------------------------
    @property
    def over(self) -> bool:
        """The output passed its budget (bytes are being dropped)."""
        return self.total > self.limits.budget_bytes

    @property
    def dropped(self) -> int:
        """Bytes of the output that are not kept (those between the head and the tail)."""
        return max(0, self.total - self.limits.budget_bytes)

    @property
    def kept(self) -> int:
        return self.total - self.dropped

    def summary(self) -> OutputSummary | None:
        """What the reports say of the output: None while it is within its budget."""
        if not self.over:
            return None
        return OutputSummary(budget_bytes=self.limits.budget_bytes, total_bytes=self.total, kept_bytes=self.kept,
                             dropped_bytes=self.dropped, stopped=self.stopped_at is not None)

    # -- writing ----------------------------------------------------------------------------
    def note(self, line: str) -> None:
        """A line of the driver's own, in both logs (not counted against the budget)."""
        data = f"[argus.driver] {line}\n".encode()
        self.log.write(data)
        self._to_ray(data)

    def feed(self, chunk: bytes) -> None:
        """The next bytes the command printed."""
        start = self.total
        self.total += len(chunk)
        self._copy(chunk, start)
        if start < self.head_bytes:
            self.log.write(chunk[:self.head_bytes - start])
            chunk = chunk[self.head_bytes - start:]
            if chunk:
                self.note(f"the output passed half its budget ({format_bytes(self.limits.budget_bytes)}): "
                          "the rest goes to driver.log.tail* until the command ends, where only the last "
                          f"{format_bytes(self.tail_bytes)} are kept and added here")
        while chunk:
            if self._tail is None or self._tail_size >= self.piece_bytes:
                self._roll()
            room = self.piece_bytes - self._tail_size
            assert self._tail is not None
            self._tail.write(chunk[:room])
            self._tail_size += min(room, len(chunk))
            chunk = chunk[room:]

    def _copy(self, chunk: bytes, start: int) -> None:
        """Ray's copy: the first half as it comes, the last half kept for the end."""
        if start < self._copy_head:
            part = chunk[:self._copy_head - start]
            self._to_ray(part)
            self._copied += len(part)
            chunk = chunk[len(part):]
        want = self.limits.ray_copy_bytes // 2
        if not chunk or want <= 0:
            return
        self._copy_tail.append(chunk[-want:])
        self._copy_tail_size += len(self._copy_tail[-1])
        while self._copy_tail_size - len(self._copy_tail[0]) >= want:
            self._copy_tail_size -= len(self._copy_tail.popleft())

    def _to_ray(self, data: bytes) -> None:
        try:
            self.out.write(data)
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # Ray's log pipe went away; driver.log still has what is kept

    def _roll(self) -> None:
        """Start a new tail file: ``driver.log.tail`` becomes ``.1``, ``.1`` becomes ``.2``…"""
        if self._tail is not None:
            self._tail.close()
            base = self.folder / "driver.log.tail"
            for n in range(TAIL_PIECES, 0, -1):
                older = base.with_name(f"driver.log.tail.{n - 1}") if n > 1 else base
                with contextlib.suppress(OSError):  # a job may have put anything there
                    os.replace(older, base.with_name(f"driver.log.tail.{n}"))
        path = self.folder / "driver.log.tail"
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # never written through: a link (or a hard link) a job left there
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        stat = os.fstat(fd)
        self._made.add((stat.st_dev, stat.st_ino))
        self._tail = os.fdopen(fd, "wb", buffering=0)
        self._tail_size = 0

    def _tail_files(self) -> list[tuple[Path, BinaryIO]]:
        """The tail files, oldest first, opened: only those this driver made (a job can
        write in its folder, and must not have another file copied into its log)."""
        names = [f"driver.log.tail.{n}" for n in range(TAIL_PIECES, 0, -1)] + ["driver.log.tail"]
        found: list[tuple[Path, BinaryIO]] = []
        for name in names:
            try:
                fd = os.open(self.folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            stat = os.fstat(fd)
            if (stat.st_dev, stat.st_ino) in self._made:
                found.append((self.folder / name, os.fdopen(fd, "rb")))
            else:
                os.close(fd)
        return found

    def close(self, last: str = "") -> None:
        """The command ended: the kept tail goes into ``driver.log`` after a line saying
        what was dropped, and Ray's copy gets its end (then ``last``, in both). Once: a
        second call does nothing."""
        if self.log.closed:
            return
        if self._tail is not None:
            self._tail.close()
            self._tail = None
        if self.total > self.head_bytes:
            files = self._tail_files()
            sizes = [os.fstat(f.fileno()).st_size for _, f in files]
            skip = max(0, sum(sizes) - self.tail_bytes)
            if self.dropped:
                self.note(f"output: {self.total} bytes printed, {self.dropped} dropped "
                          f"({format_bytes(self.dropped)}, over the budget of {format_bytes(self.limits.budget_bytes)}); "
                          f"the first {self.head_bytes} and the last {self.tail_bytes} bytes are kept")
            for (path, src), size in zip(files, sizes):
                with src:
                    if skip >= size:
                        skip -= size
                    else:
                        src.seek(skip)
                        skip = 0
                        while block := src.read(1 << 20):
                            self.log.write(block)
                with contextlib.suppress(OSError):
                    path.unlink()
        self._copy_end()
        if last:
            self.note(last)
        self.log.close()

    def _copy_end(self) -> None:
        rest = self.total - self._copied
        if rest <= 0:
            return
        want = self.limits.ray_copy_bytes // 2
        tail = b"".join(self._copy_tail)[-min(rest, want):] if want > 0 else b""
        if len(tail) < rest:
            self._to_ray(f"[argus.driver] {rest - len(tail)} bytes of the output are not in Ray's job log "
                         f"(it keeps the first and last {format_bytes(self.limits.ray_copy_bytes // 2)}); "
                         "driver.log in the job's folder has more\n".encode())
        self._to_ray(tail)
