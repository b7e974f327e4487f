"""The SFTP door's file operations, each on descriptors :mod:`argus.safefs` walked from the
operator's base without following a link: stat, list, open (``O_NOFOLLOW`` relative to the
walked folder), read, write (bounded), remove, rename, mkdir, rmdir. Blocking: the server
calls them off the event loop where they may wait on the disk.

Errors are :class:`argus.safefs.Refused` with the REST API's statuses (400, 403, 404, 409)
and a message that names the user's path, never the server's.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Iterator

from argus import safefs
from argus.sftp.view import Target

__all__ = ["Handle", "MAX_LISTING", "list_dir", "lstat", "make_dir", "open_file", "remove_dir",
           "read_only_stat", "remove_file", "rename", "set_times", "stat_path", "truncate", "virtual_stat", "write"]

MAX_LISTING = 200_000  # entries of one folder sent to a client; the rest are left out
_FILE_MODE = {True: 0o644, False: 0o600}  # common (read by every job) / a user's own
_DIR_MODE = 0o755
_STARTED = int(time.time())  # the virtual folders' times


class Handle:
    """An open regular file: its fd, whether it may be written, and its byte limit."""

    def __init__(self, fd: int, target: Target, writable: bool, limit: int, append: bool = False) -> None:
        self.fd, self.target, self.writable, self.limit = fd, target, writable, limit
        self.append = append

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def virtual_stat() -> os.stat_result:
    """A virtual folder (``/``, ``/common``): read-only, owned by the server's user."""
    t = _STARTED
    return os.stat_result((stat.S_IFDIR | 0o555, 0, 0, 2, os.getuid(), os.getgid(), 0, t, t, t),
                          {"st_atime": float(t), "st_mtime": float(t), "st_ctime": float(t),
                           "st_atime_ns": t * 10**9, "st_mtime_ns": t * 10**9, "st_ctime_ns": t * 10**9})


def read_only_stat(st: os.stat_result) -> os.stat_result:
    """``st`` without its write bits: how a read-only area is shown in a listing."""
    fields = list(st)
    fields[0] = st.st_mode & ~0o222
    return os.stat_result(fields, {"st_atime_ns": st.st_atime_ns, "st_mtime_ns": st.st_mtime_ns,
                                   "st_ctime_ns": st.st_ctime_ns, "st_atime": st.st_atime,
                                   "st_mtime": st.st_mtime, "st_ctime": st.st_ctime})


def _read_only(t: Target) -> safefs.Refused:
    if t.area == "jobs":
        return safefs.Refused(403, f"{t.path}: jobs is read-only but for deleting a finished attempt's files: your tasks write it "
                              "(get from it; put into datasets/, models/ or code/)")
    if t.area.startswith("common/"):
        return safefs.Refused(403, f"{t.path}: {t.area} is read-only; ask an admin to add data there")
    return safefs.Refused(403, f"{t.path} is read-only")


def _writable(t: Target, finished_attempt: bool = False) -> None:
    """Refuse a write to ``t`` unless its area is writable, or (``finished_attempt``: the
    caller checked it against the log) it lies in a finished attempt's folder of jobs."""
    if finished_attempt and t.area == "jobs" and t.parts:
        return
    if t.virtual is not None:
        raise safefs.Refused(403, f"{t.path} is a fixed folder of your home; work inside its areas")
    if not t.writable:
        raise _read_only(t)
    if not t.parts:
        raise safefs.Refused(403, f"{t.path} is an area itself; work inside it")


def _failed(t: Target, doing: str, exc: OSError) -> safefs.Refused:
    code = {errno.EACCES: 403, errno.EPERM: 403, errno.ENOENT: 404, errno.ELOOP: 400}.get(exc.errno or 0, 409)
    if exc.errno == errno.ELOOP:
        return safefs.Refused(400, f"{t.path} is a symbolic link; Argus does not follow links in users' folders")
    return safefs.Refused(code, f"cannot {doing} {t.path}: {exc.strerror or exc}")


def _base(t: Target) -> Path:
    return Path(t.base)


def _walk(t: Target) -> tuple[int, os.stat_result]:
    """The fd and stat of ``t`` (a folder or a regular file); an own area's root is made
    on first look, as the REST API does; a missing ``jobs`` is an empty folder."""
    if not t.parts and t.writable:
        fd = safefs.open_dir(_base(t), t.names, t.label, create_from=t.top - 1)
        return fd, os.fstat(fd)
    return safefs.walk(_base(t), t.names, t.label)


def _parent(t: Target) -> int:
    """The fd of the folder holding ``t``'s last name (the area's root made if missing)."""
    return safefs.open_dir(_base(t), t.names[:-1], t.label,
                           create_from=t.top - 1 if len(t.names) - 1 == t.top else len(t.names))


def stat_path(t: Target) -> os.stat_result:
    """``t``'s attributes (a link anywhere on the way is refused, never followed)."""
    if t.virtual is not None:
        return virtual_stat()
    try:
        fd, st = _walk(t)
    except safefs.Refused as exc:
        if exc.status == 404 and not t.parts and not t.writable:
            return virtual_stat()  # a read-only area not made yet (no task has run)
        raise
    os.close(fd)
    return st


def lstat(t: Target) -> os.stat_result:
    """``t``'s own attributes: a link is shown as a link (and never followed)."""
    if t.virtual is not None or not t.parts:
        return stat_path(t)
    fd = safefs.open_dir(_base(t), t.names[:-1], t.label, create_from=len(t.names))  # makes nothing
    try:
        st = os.stat(t.names[-1], dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        raise _failed(t, "look at", exc) from exc
    finally:
        os.close(fd)
    return st


def list_dir(t: Target) -> Iterator[tuple[str, os.stat_result]]:
    """The entries of the folder ``t`` with their own attributes (links not followed),
    at most :data:`MAX_LISTING`."""
    if t.virtual is not None:
        for name in t.virtual:
            yield name, virtual_stat()
        return
    try:
        fd, st = _walk(t)
    except safefs.Refused as exc:
        if exc.status == 404 and not t.parts and not t.writable:
            return
        raise
    try:
        if not stat.S_ISDIR(st.st_mode):
            raise safefs.Refused(400, f"{t.path} is a file, not a folder")
        with os.scandir(fd) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_LISTING:
                    return
                try:
                    yield entry.name, entry.stat(follow_symlinks=False)
                except OSError:
                    continue
    finally:
        os.close(fd)


def open_file(t: Target, *, write: bool, create: bool, truncate: bool, exclusive: bool,
              append: bool, limit: int) -> Handle:
    """Open the regular file ``t``: the last name ``O_NOFOLLOW`` relative to its walked
    folder, ``O_NONBLOCK`` (a FIFO a job planted cannot hang the server; it is refused)."""
    if t.virtual is not None:
        raise safefs.Refused(400, f"{t.path} is a folder")
    if not write:
        fd, st = _walk(t)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise safefs.Refused(400, f"{t.path} is a folder, not a file")
        os.set_blocking(fd, True)
        return Handle(fd, t, False, limit)
    _writable(t)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    # No O_TRUNC here: the file is checked first (a hard link's other name may be outside
    # the user's area), then truncated on its fd.
    flags |= (os.O_CREAT if create else 0) | (os.O_EXCL if exclusive else 0) | (os.O_APPEND if append else 0)
    parent = _parent(t)
    try:
        fd = os.open(t.names[-1], flags, _FILE_MODE[t.area.startswith("common/")], dir_fd=parent)
    except OSError as exc:
        raise _failed(t, "open", exc) from exc
    finally:
        os.close(parent)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)  # a hard link could reach a file outside the user's area: not written
        raise safefs.Refused(400, f"{t.path} is not a regular file of its own")
    os.set_blocking(fd, True)
    if truncate:
        os.ftruncate(fd, 0)
    return Handle(fd, t, True, limit, append)


def write(h: Handle, offset: int, data: bytes) -> None:
    """``data`` at ``offset`` (the end, for a file opened to append), within the limit."""
    end = (os.fstat(h.fd).st_size if h.append else offset) + len(data)
    if end > h.limit:
        raise safefs.Refused(413, f"{h.target.path}: a file may hold at most {h.limit} bytes "
                             f"({h.limit / 2**30:.1f} GiB, v2.api.max_upload_bytes)")
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(h.fd, view, offset)
            view, offset = view[n:], offset + n
    except OSError as exc:  # a full disk, a quota
        raise _failed(h.target, "write", exc) from exc


def truncate(h: Handle, size: int) -> None:
    if not h.writable:
        raise _read_only(h.target)
    if size > h.limit:
        raise safefs.Refused(413, f"{h.target.path}: a file may hold at most {h.limit} bytes")
    os.ftruncate(h.fd, size)


def set_times(t: Target, atime: float, mtime: float) -> None:
    """Set a file's or folder's times (``put -p``), on its walked fd."""
    _writable(t)
    fd, _ = _walk(t)
    try:
        os.utime(fd, (atime, mtime))
    finally:
        os.close(fd)


def remove_file(t: Target, finished_attempt: bool = False) -> None:
    """Delete the file (or link: removed, not followed) ``t``; a folder is refused."""
    _writable(t, finished_attempt)
    st = lstat(t)
    if stat.S_ISDIR(st.st_mode):
        raise safefs.Refused(400, f"{t.path} is a folder: use rmdir (on an empty folder)")
    safefs.remove(_parent(t), t.names[-1], t.path, recursive=False)


def make_dir(t: Target) -> None:
    _writable(t)
    parent = _parent(t)
    try:
        os.mkdir(t.names[-1], _DIR_MODE, dir_fd=parent)
    except OSError as exc:
        raise _failed(t, "make", exc) from exc
    finally:
        os.close(parent)


def remove_dir(t: Target, finished_attempt: bool = False) -> None:
    """Remove the empty folder ``t``."""
    _writable(t, finished_attempt)
    parent = _parent(t)
    try:
        st = os.stat(t.names[-1], dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise safefs.Refused(400, f"{t.path} is not a folder")
        os.rmdir(t.names[-1], dir_fd=parent)
    except OSError as exc:
        raise _failed(t, "remove", exc) from exc
    finally:
        os.close(parent)


def rename(old: Target, new: Target, *, replace: bool) -> None:
    """Move ``old`` to ``new`` (both in writable areas), each folder walked; an existing
    ``new`` is refused unless ``replace`` (posix-rename)."""
    _writable(old)
    _writable(new)
    src = _parent(old)
    try:
        dst = _parent(new)
    except BaseException:
        os.close(src)
        raise
    try:
        if not replace:
            try:
                os.stat(new.names[-1], dir_fd=dst, follow_symlinks=False)
                raise safefs.Refused(409, f"{new.path} exists already")
            except FileNotFoundError:
                pass
        os.rename(old.names[-1], new.names[-1], src_dir_fd=src, dst_dir_fd=dst)
    except OSError as exc:
        raise _failed(old, "rename", exc) from exc
    finally:
        os.close(src)
        os.close(dst)
