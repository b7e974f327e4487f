"""Bounded line readers over an open regular file: the end of a log read backwards, and
the lines of a file's last bytes read forwards. Both read each byte at most once, hold at
most one chunk and one (capped) line, and stop at a byte budget, whatever a job wrote: a
32 MiB log without a newline (tqdm's ``\\r`` progress) or a 2 GiB sparse ``*.jsonl``.
"""

from __future__ import annotations

import os
from typing import Iterator

__all__ = ["CHUNK", "last_lines", "window_lines"]

CHUNK = 1 << 20


def _marker(cut: int | None) -> bytes:
    """What replaces the part of a line that is not shown."""
    if cut is None:
        return b"[argus: the start of this line is beyond the bytes read] "
    return b"[argus: %d bytes of this line left out] " % cut


class _Backwards:
    """One line assembled from its end towards its start, keeping its last ``max_line``
    bytes (the latest state of a ``\\r``-updated progress line) and counting the rest."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.parts: list[bytes] = []  # newest piece first
        self.kept = self.cut = 0

    def add(self, piece: bytes) -> None:
        room = self.max_line - self.kept
        if len(piece) > room:
            self.cut += len(piece) - room
            piece = piece[len(piece) - room:] if room > 0 else b""
        if piece:
            self.parts.append(piece)
            self.kept += len(piece)

    def take(self, whole: bool) -> bytes | None:
        """The line (None if nothing was added); ``whole``: its start was reached."""
        if not (self.kept or self.cut):
            return None
        line = b"".join(reversed(self.parts))
        if self.cut or not whole:
            line = _marker(self.cut if whole else None) + line
        self.parts, self.kept, self.cut = [], 0, 0
        return line


def last_lines(fd: int, size: int, n: int, *, max_line: int, max_bytes: int,
               chunk: int = 1 << 16) -> list[bytes]:
    """The last ``n`` lines (``\\n``-terminated, ends kept) of the first ``size`` bytes of
    ``fd``: read backwards in ``chunk``-sized preads, at most ``max_bytes`` in all (linear
    time, whatever the lines' lengths); a line longer than ``max_line`` keeps its end after
    a marker."""
    lines: list[bytes] = []  # newest first
    line = _Backwards(max_line)
    pos = size
    while n > 0 and pos > 0 and len(lines) < n and size - pos < max_bytes:
        step = min(chunk, pos, max_bytes - (size - pos))
        pos -= step
        data = os.pread(fd, step, pos)
        end = len(data)
        while len(lines) < n:
            i = data.rfind(b"\n", 0, end)
            if i < 0:
                line.add(data[:end])
                break
            line.add(data[i + 1:end])
            done = line.take(True)
            if done is not None:  # None: the newline that ends the file
                lines.append(done)
            line.add(b"\n")  # the newline ends the line before it
            end = i
    if n > 0 and len(lines) < n:
        last = line.take(pos == 0)
        if last is not None:
            lines.append(last)
    lines.reverse()
    return lines


def window_lines(fd: int, budget: int, max_line: int) -> Iterator[bytes]:
    """The lines (without ``\\n``) of the last ``budget`` bytes of ``fd``, in order, read
    forwards in chunks. A window starting mid-file skips its first, partial line; a line
    longer than ``max_line`` is skipped without being held."""
    size = os.fstat(fd).st_size
    pos = max(0, size - budget)
    skipping = pos > 0  # inside a line: drop it, through its newline
    carry = b""
    while pos < size:
        data = os.pread(fd, min(CHUNK, size - pos), pos)
        if not data:  # truncated meanwhile
            return
        pos += len(data)
        start = 0
        while (i := data.find(b"\n", start)) >= 0:
            if not skipping and len(carry) + i - start <= max_line:
                yield carry + data[start:i]
            skipping, carry, start = False, b"", i + 1
        if skipping:
            continue
        if len(carry) + len(data) - start > max_line:
            skipping, carry = True, b""  # too long: dropped through its newline
        else:
            carry += data[start:]  # at most max_line bytes held
    if carry and not skipping:
        yield carry
