"""Reading an attempt's job directory: the driver log's tail, training progress, and the
read-only ``jobs/`` files area.

``<shared>/users/<user>/jobs/<submission_id>/`` holds ``driver.log`` (stdout and stderr),
``exit_code``, ``result.json``, the spec and command files, checkpoints and verl-style JSONL
metrics (its file logger: one ``{"step": N, "data": {...}}`` object per line). Lines
``step:N - key:value - ...`` in the driver log (verl's console logger) are the fallback when
there is no JSONL file.

A user's jobs write anything under that user's home, symlinks included (``driver.log ->
/shared/users/bob/jobs/x/driver.log``). So everything here is opened by :func:`walk`: from
``<shared>/users`` down, each component with ``O_NOFOLLOW``, and a symlink is refused, never
followed. Every read is bounded (bytes per file, entries per listing, folders per search).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator, Sequence

import msgspec

from argus.api.schemas import FileEntry

__all__ = [
    "MAX_LISTING", "Refused", "last_step", "list_dir", "parse_progress", "read_chunks",
    "read_new", "tail_lines", "walk",
]

_STEP_LINE = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
_KV = re.compile(r"([A-Za-z0-9_./@\-]+):\s*(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")
MAX_POINTS = 5000
MAX_LISTING = 1000  # entries in one folder listing: a checkpoint folder can hold many more
MAX_PARSE_BYTES = 64 << 20  # read from the end of one metrics file / driver log
MAX_SEARCH_DIRS = 200  # folders looked into for nested metrics*.jsonl
MAX_SEARCH_DEPTH = 3
MAX_METRICS_FILES = 16
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO a job planted must not hang the server (it is refused after).
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """A path in a job folder that is not served: ``status`` (400/403/404) and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _label(names: Sequence[str], i: int) -> str:
    """How a component is named to the user: ``jobs/<sid>/x`` (names[0] is the user)."""
    return "/".join(names[1:i + 1]) if i else f"the home folder of {names[0]}"


def walk(base: Path, names: Sequence[str]) -> tuple[int, os.stat_result]:
    """Open ``base`` (the operator's ``<shared>/users``: followed), then each of ``names``
    under it without following symlinks. Returns the last one's fd (a folder or a regular
    file; the caller closes it) and its stat. Raises :class:`Refused` for a symlink (named),
    anything missing, or anything that is neither a folder nor a regular file."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(404, f"{base.name or base} not found") from exc
    try:
        for i, name in enumerate(names):
            fd = _step(fd, names, i)
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, names: Sequence[str], i: int) -> int:
    """Open ``names[i]`` under ``fd`` (then closed) without following it."""
    name, last = names[i], i == len(names) - 1
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise Refused(404, f"{_label(names, i)} not found") from exc
    except (ValueError, UnicodeError, OSError) as exc:
        raise Refused(400, f"cannot open {_label(names, i)!r}: {exc}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise Refused(400, f"{_label(names, i)} is a symbolic link; Argus does not follow "
                      "links in job folders")
    if stat.S_ISDIR(st.st_mode):
        flags = _DIR
    elif last and stat.S_ISREG(st.st_mode):
        flags = _FILE
    else:
        raise Refused(404 if not last else 400, f"{_label(names, i)} is not "
                      f"{'a folder' if not last else 'a regular file or folder'}")
    try:
        new = os.open(name, flags, dir_fd=fd)
    except OSError as exc:  # replaced between the stat and the open: refuse, never follow
        if exc.errno == errno.ELOOP:
            raise Refused(400, f"{_label(names, i)} is a symbolic link; Argus does not "
                          "follow links in job folders") from exc
        code = 403 if exc.errno == errno.EACCES else 404
        raise Refused(code, f"cannot open {_label(names, i)}: {exc.strerror}") from exc
    os.close(fd)
    if stat.S_IFMT(os.fstat(new).st_mode) != stat.S_IFMT(st.st_mode):
        os.close(new)
        raise Refused(409, f"{_label(names, i)} changed while being opened; try again")
    return new


def _job_names(path: Path, depth: int) -> tuple[Path, list[str]]:
    """``<shared>/users`` and the names below it of a path shaped
    ``<shared>/users/<user>/jobs/<sid>[/<file>]`` (``depth`` names)."""
    return path.parents[depth - 1], list(path.parts[-depth:])


def _open_job_file(path: Path) -> int | None:
    """An fd for ``<shared>/users/<user>/jobs/<sid>/<file>``; None if missing or refused."""
    try:
        fd, st = walk(*_job_names(path, 4))
    except Refused:
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
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


def tail_lines(path: Path, n: int, chunk: int = 65536) -> tuple[str, int]:
    """The last ``n`` lines of ``path`` and the file size they end at ("" if missing)."""
    fd = _open_job_file(path)
    if fd is None:
        return "", 0
    with os.fdopen(fd, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        pos, data = size, b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.splitlines(keepends=True)[-n:] if n > 0 else []
    return b"".join(lines).decode("utf-8", "replace"), size


def read_new(path: Path, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
    """Bytes appended to ``path`` after ``offset`` (complete lines only)."""
    fd = _open_job_file(path)
    if fd is None:
        return b"", offset
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        data = f.read(limit)
    cut = data.rfind(b"\n")
    if cut < 0:
        return b"", offset
    return data[: cut + 1], offset + cut + 1


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _tail_bytes(fd: int, limit: int = MAX_PARSE_BYTES) -> bytes:
    """The last ``limit`` bytes of ``fd``, from the first whole line; closes ``fd``."""
    with os.fdopen(fd, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        data = f.read(limit)
    if size > limit:
        data = data[data.find(b"\n") + 1:]
    return data


def _jsonl_lines(data: bytes) -> Iterator[tuple[int, dict[str, float]]]:
    for line in data.splitlines():
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("step"), int):
            continue
        inner = obj.get("data")
        metrics = _numbers(inner if isinstance(inner, dict) else obj)
        metrics.pop("step", None)
        yield obj["step"], metrics


def _metrics_files(top: int) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of ``*.jsonl`` in the folder ``top`` and ``metrics*.jsonl``
    below it (bounded walk; symlinks are neither followed nor read)."""
    scheduled = found = 0
    for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
        depth = 0 if dirpath == "." else dirpath.count("/")
        # Prune before descending: at most MAX_SEARCH_DIRS folders are ever looked into.
        del dirnames[0 if depth >= MAX_SEARCH_DEPTH else max(0, MAX_SEARCH_DIRS - scheduled):]
        scheduled += len(dirnames)
        for name in filenames:
            if not name.endswith(".jsonl") or (depth and not name.startswith("metrics")):
                continue
            if found >= MAX_METRICS_FILES:
                return
            try:
                fd = os.open(name, _FILE, dir_fd=dirfd)
            except OSError:
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            os.set_blocking(fd, True)
            found += 1
            yield os.path.normpath(os.path.join(dirpath, name)), _tail_bytes(fd)


def _log_points(data: bytes) -> Iterator[tuple[int, dict[str, float]]]:
    for line in data.decode("utf-8", "replace").splitlines():
        m = _STEP_LINE.search(line)
        if m:
            yield int(m.group(1)), {k: float(v) for k, v in _KV.findall(m.group(2))}


def parse_progress(directory: Path) -> list[tuple[int, dict[str, float]]]:
    """Steps with their metrics, in step order (later lines win for a repeated step).
    ``directory`` is an attempt's ``<shared>/users/<user>/jobs/<sid>``."""
    points: dict[int, dict[str, float]] = {}
    try:
        top, st = walk(*_job_names(directory, 3))
    except Refused:
        return []
    try:
        if stat.S_ISDIR(st.st_mode):
            for _, data in sorted(_metrics_files(top)):
                for step, metrics in _jsonl_lines(data):
                    points.setdefault(step, {}).update(metrics)
            if not points:  # no usable JSONL: verl's console lines in the driver log
                with contextlib.suppress(OSError):
                    log = os.open("driver.log", _FILE, dir_fd=top)
                    if stat.S_ISREG(os.fstat(log).st_mode):
                        os.set_blocking(log, True)
                        for step, metrics in _log_points(_tail_bytes(log)):
                            points.setdefault(step, {}).update(metrics)
                    else:
                        os.close(log)
    finally:
        os.close(top)
    steps = sorted(points)[-MAX_POINTS:]
    return [(s, points[s]) for s in steps]


_LAST_STEP = re.compile(rb"(?:^|\s)step:(\d+)\s+-")


def last_step(log: Path, window: int = 65536) -> int | None:
    """The last ``step:N - …`` in the final ``window`` bytes of a driver log: what a task
    list shows for a running task without reading the whole log (bounded work per row)."""
    fd = _open_job_file(log)
    if fd is None:
        return None
    found = _LAST_STEP.findall(_tail_bytes(fd, window))
    return int(found[-1]) if found else None
