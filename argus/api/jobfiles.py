"""Reading an attempt's job directory: the driver log's tail, training progress, and the
read-only ``jobs/`` files area.

``<shared>/users/<user>/jobs/<submission_id>/`` holds ``driver.log`` (stdout and stderr),
``exit_code``, ``result.json``, the spec and command files, checkpoints and verl-style JSONL
metrics (its file logger: one ``{"step": N, "data": {...}}`` object per line). Lines
``step:N - key:value - ...`` in the driver log (verl's console logger) are the fallback when
there is no JSONL file.

A user's jobs write anything under that user's home, symlinks included (``driver.log ->
/shared/users/bob/jobs/x/driver.log``). So everything here is opened by
:func:`argus.api.safefs.walk`: from ``<shared>/users`` down, each component with
``O_NOFOLLOW``, and a symlink is refused, never followed. Every read is bounded and
streamed (:mod:`argus.api.logread`): bytes per file and per request, one line's length,
metric values kept, entries per listing, folders per search; a tail reads backwards in
linear time.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

from argus.api import logread
from argus.safefs import FILE_FLAGS, Refused, walk
from argus.api.schemas import FileEntry

__all__ = [
    "MAX_LISTING", "Refused", "list_dir", "parse_progress", "read_chunks",
    "read_new", "tail_lines", "walk",
]

_STEP_LINE = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
_KV = re.compile(r"([A-Za-z0-9_./@\-]+):\s*(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")
MAX_POINTS = 5000
MAX_LISTING = 1000  # entries in one folder listing: a checkpoint folder can hold many more
MAX_SEARCH_DIRS = 200  # folders looked into for nested metrics*.jsonl
MAX_SEARCH_DEPTH = 3
MAX_METRICS_FILES = 16
# Progress: bytes read from the end of one metrics file / driver log, and in all for one
# request; a longer line is skipped unread (a verl JSONL line is a few KiB); keys kept per
# step and metric values in all (what bounds the answer's memory, not only the bytes read).
MAX_PARSE_BYTES = 16 << 20
MAX_PROGRESS_BYTES = 32 << 20
MAX_METRIC_LINE = 256 << 10
MAX_METRICS_PER_STEP = 256
MAX_VALUES = 1_000_000
# Logs: one line's bytes shown (its end), and bytes read from a log's end for one tail.
MAX_LINE = 64 << 10
MAX_TAIL_BYTES = 16 << 20
_FILE = FILE_FLAGS


def _job_names(path: Path, depth: int) -> tuple[Path, list[str]]:
    """``<shared>/users`` and the names below it of a path shaped
    ``<shared>/users/<user>/jobs/<sid>[/<file>]`` (``depth`` names)."""
    return path.parents[depth - 1], list(path.parts[-depth:])


def _open_job_file(path: Path, strict: bool = False) -> int | None:
    """A blocking fd for the regular file ``<shared>/users/<user>/jobs/<sid>/<file>``; None
    if missing. Anything else refused (a link, a folder, a FIFO) is None too, or, with
    ``strict``, raised as :class:`Refused` (naming it)."""
    try:
        fd, st = walk(*_job_names(path, 4))
    except Refused as exc:
        if strict and exc.status != 404:
            raise
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if strict:
            raise Refused(400, f"{'/'.join(path.parts[-3:])} is not a regular file")
        return None
    os.set_blocking(fd, True)
    return fd


def list_dir(fd: int, limit: int = MAX_LISTING) -> tuple[list[FileEntry], bool]:
    """The entries of the folder ``fd`` (at most ``limit``, by name), and whether some were
    left out. Symlinks are listed as ``link`` and never followed."""
    entries: list[FileEntry] = []
    truncated = False
    with os.scandir(fd) as it:
        for e in it:
            if len(entries) >= limit:
                truncated = True
                break
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                    else "link" if stat.S_ISLNK(st.st_mode) else "other")
            # A job may name a file with bytes that are not UTF-8: shown, not served.
            name = e.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            entries.append(FileEntry(name=name, is_dir=kind == "dir", type=kind,
                                     size=st.st_size if kind == "file" else 0,
                                     modified=st.st_mtime))
    entries.sort(key=lambda e: e.name)
    return entries, truncated


def read_chunks(fd: int, size: int, chunk: int = 1 << 18) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fd`` (its size when opened: a growing log is not
    followed past it), in chunks; closes ``fd``."""
    try:
        os.set_blocking(fd, True)
        left = size
        while left > 0:
            data = os.read(fd, min(chunk, left))
            if not data:
                return
            left -= len(data)
            yield data
    finally:
        os.close(fd)


def tail_lines(path: Path, n: int, chunk: int = 1 << 16) -> tuple[str, int]:
    """The last ``n`` lines of ``path`` and the file size they end at ("" if missing).
    Linear in what it reads, at most ``MAX_TAIL_BYTES``; a line over ``MAX_LINE`` bytes
    keeps its end. Raises :class:`Refused` for a link or anything but a regular file."""
    fd = _open_job_file(path, strict=True)
    if fd is None:
        return "", 0
    try:
        size = os.fstat(fd).st_size
        lines = logread.last_lines(fd, size, n, max_line=MAX_LINE, max_bytes=MAX_TAIL_BYTES,
                                   chunk=chunk)
    finally:
        os.close(fd)
    return b"".join(lines).decode("utf-8", "replace"), size


def read_new(path: Path, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
    """Bytes appended to ``path`` after ``offset``: complete lines, or ``limit`` bytes of a
    line longer than that (passed on in pieces rather than waited for forever)."""
    fd = _open_job_file(path)
    if fd is None:
        return b"", offset
    try:
        data = os.pread(fd, limit, offset)
    finally:
        os.close(fd)
    cut = data.rfind(b"\n")
    if cut < 0:
        return (data, offset + len(data)) if len(data) >= limit else (b"", offset)
    return data[: cut + 1], offset + cut + 1


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class _Points:
    """Steps with their metrics (later lines win for a repeated step), bounded: the latest
    ``MAX_POINTS`` steps, ``MAX_METRICS_PER_STEP`` keys each, ``MAX_VALUES`` values in all."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self.values = 0
        self._keys: dict[str, str] = {}  # one str per metric name, not one per line

    @property
    def full(self) -> bool:
        return self.values >= MAX_VALUES

    def add(self, step: int, metrics: dict[str, float]) -> None:
        row = self.steps.setdefault(step, {})
        for key, value in metrics.items():
            if key not in row:
                if len(row) >= MAX_METRICS_PER_STEP:
                    continue
                self.values += 1
            row[self._keys.setdefault(key, key)] = value
        if len(self.steps) > 2 * MAX_POINTS:  # a step dropped here is never among the last
            self.steps = {s: self.steps[s] for s in sorted(self.steps)[-MAX_POINTS:]}
            self.values = sum(map(len, self.steps.values()))

    def result(self) -> list[tuple[int, dict[str, float]]]:
        return [(s, self.steps[s]) for s in sorted(self.steps)[-MAX_POINTS:]]


_Point = tuple[int, dict[str, float]]


def _jsonl_point(line: bytes) -> _Point | None:
    try:
        obj = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("step"), int):
        return None
    inner = obj.get("data")
    metrics = _numbers(inner if isinstance(inner, dict) else obj)
    metrics.pop("step", None)
    return obj["step"], metrics


def _log_point(raw: bytes) -> _Point | None:
    m = _STEP_LINE.search(raw.decode("utf-8", "replace"))
    return (int(m.group(1)), {k: float(v) for k, v in _KV.findall(m.group(2))}) if m else None


def _metrics_files(top: int) -> list[tuple[str, int]]:
    """(relative path, open fd), by path, of the regular ``*.jsonl`` in the folder ``top``
    and ``metrics*.jsonl`` below it (bounded walk; links are neither followed nor read)."""
    found: list[tuple[str, int]] = []
    scheduled = 0
    try:
        for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            depth = 0 if dirpath == "." else dirpath.count("/")
            # Prune before descending: at most MAX_SEARCH_DIRS folders are ever looked into.
            del dirnames[0 if depth >= MAX_SEARCH_DEPTH else max(0, MAX_SEARCH_DIRS - scheduled):]
            scheduled += len(dirnames)
            for name in filenames:
                if not name.endswith(".jsonl") or (depth and not name.startswith("metrics")):
                    continue
                if len(found) >= MAX_METRICS_FILES:
                    return sorted(found)
                try:  # O_NOFOLLOW: a *.jsonl linked to /dev/zero is never opened
                    fd = os.open(name, _FILE, dir_fd=dirfd)
                except OSError:
                    continue
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device: not read
                    os.close(fd)
                    continue
                os.set_blocking(fd, True)
                found.append((os.path.normpath(os.path.join(dirpath, name)), fd))
    except BaseException:
        for _, fd in found:
            os.close(fd)
        raise
    return sorted(found)


def _read_points(fd: int, budget: int, parse: Callable[[bytes], _Point | None],
                 points: _Points) -> int:
    """Add the points of the lines in the last ``budget`` bytes of ``fd`` (closed here);
    returns the bytes that costs."""
    try:
        cost = min(budget, os.fstat(fd).st_size)
        for line in logread.window_lines(fd, cost, MAX_METRIC_LINE):
            if points.full:
                break
            point = parse(line)
            if point is not None:
                points.add(*point)
        return cost
    finally:
        os.close(fd)


def parse_progress(directory: Path) -> list[tuple[int, dict[str, float]]]:
    """Steps with their metrics, in step order (later lines win for a repeated step).
    ``directory`` is an attempt's ``<shared>/users/<user>/jobs/<sid>``; [] when missing.
    Reads at most ``MAX_PROGRESS_BYTES``, streamed. Raises :class:`Refused` (naming it)
    when a component of ``directory`` is a link or not a folder."""
    points = _Points()
    try:
        top, st = walk(*_job_names(directory, 3))
    except Refused as exc:
        if exc.status == 404:
            return []
        raise
    try:
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(400, f"{'/'.join(directory.parts[-2:])} is not a folder")
        budget = MAX_PROGRESS_BYTES
        files = _metrics_files(top)
        try:
            while files and budget > 0 and not points.full:
                # An equal share each (what a small file leaves goes to the next): a large
                # a.jsonl must not use up what metrics.jsonl needs.
                share = min(MAX_PARSE_BYTES, budget // len(files))
                budget -= _read_points(files.pop(0)[1], share, _jsonl_point, points)
        finally:
            for _, fd in files:  # the rest, unread
                os.close(fd)
        if not points.steps and budget > 0:  # no usable JSONL: verl's console lines
            try:
                log = os.open("driver.log", _FILE, dir_fd=top)
            except OSError:
                log = -1
            if log >= 0 and not stat.S_ISREG(os.fstat(log).st_mode):
                os.close(log)
            elif log >= 0:
                os.set_blocking(log, True)
                _read_points(log, min(budget, MAX_PARSE_BYTES), _log_point, points)
    finally:
        os.close(top)
    return points.result()


