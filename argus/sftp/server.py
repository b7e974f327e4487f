"""The SFTP subsystem (asyncssh's ``SFTPServer``): every operation maps the user's path
with :func:`argus.sftp.view.resolve` and acts through :mod:`argus.sftp.fs`. Nothing here
opens a path by name, and no asyncssh default (which would follow links) is left in place:
links cannot be made, read or followed.

Each operation first asks the session whether it is still allowed (its key or token not
revoked, its user not disabled); the door closes a session that is not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Protocol, TypeVar

import asyncssh
from asyncssh import SFTPAttrs, SFTPName

from argus import safefs
from argus.lifecycle import AttemptStatus
from argus.sftp import fs
from argus.sftp.view import Target, normalize, resolve


class SessionLike(Protocol):
    """What a session offers its SFTP server (``argus.sftp.door.Session``)."""

    user_id: str
    is_admin: bool
    door: Any  # the SftpDoor: its ``config``

    def check(self) -> None: ...

__all__ = ["ArgusSFTPServer", "SessionLike"]

T = TypeVar("T")
# Below this many bytes a read or write is done on the event loop: a hop to a thread per
# 32 KiB request (OpenSSH's sftp size) would cost more than the copy itself.
INLINE_IO = 1 << 20


def _sftp_error(exc: safefs.Refused) -> asyncssh.SFTPError:
    kind = {404: asyncssh.SFTPNoSuchFile, 403: asyncssh.SFTPPermissionDenied,
            413: asyncssh.SFTPQuotaExceeded}.get(exc.status, asyncssh.SFTPFailure)
    if exc.status == 400 and "symbolic link" in exc.detail:
        kind = asyncssh.SFTPPermissionDenied
    return kind(exc.detail)


class ArgusSFTPServer(asyncssh.SFTPServer):
    """One SFTP session of one authenticated user, confined to their view."""

    def __init__(self, chan: asyncssh.SSHServerChannel, session: SessionLike) -> None:
        super().__init__(chan)
        self.session = session
        self.shared = Path(session.door.config.shared_root)
        self.limit = session.door.config.v2.api.max_upload_bytes
        self.handles: set[fs.Handle] = set()

    # ------------------------------------------------------------------ plumbing
    def _target(self, path: bytes) -> Target:
        self.session.check()
        try:
            return resolve(self.shared, self.session.user_id, path, may_write_common=self.session.is_admin)
        except safefs.Refused as exc:
            raise _sftp_error(exc) from exc

    async def _run(self, fn: Callable[..., T], *args: object, inline: bool = False) -> T:
        try:
            if inline:
                return fn(*args)
            return await asyncio.to_thread(fn, *args)
        except safefs.Refused as exc:
            raise _sftp_error(exc) from exc
        except OSError as exc:  # what the walk did not name: a 4xx-like failure, never a crash
            raise asyncssh.SFTPFailure(exc.strerror or str(exc)) from exc

    def _attrs(self, st: os.stat_result) -> SFTPAttrs:
        return SFTPAttrs.from_local(st)

    # ------------------------------------------------------------------ names and attributes
    def realpath(self, path: bytes) -> bytes:
        self.session.check()
        try:
            return normalize(path).encode("utf-8", "surrogateescape")
        except safefs.Refused as exc:
            raise _sftp_error(exc) from exc

    async def stat(self, path: bytes) -> SFTPAttrs:
        return self._attrs(await self._run(fs.stat_path, self._target(path)))

    async def lstat(self, path: bytes) -> SFTPAttrs:
        return self._attrs(await self._run(fs.lstat, self._target(path)))

    async def fstat(self, file_obj: object) -> SFTPAttrs:
        handle = self._handle(file_obj)
        return self._attrs(os.fstat(handle.fd))

    async def scandir(self, path: bytes) -> AsyncIterator[SFTPName]:
        target = self._target(path)
        here = await self._run(fs.stat_path, target)
        entries = await self._run(lambda: list(fs.list_dir(target)))
        yield SFTPName(b".", attrs=self._attrs(here))
        yield SFTPName(b"..", attrs=self._attrs(fs.virtual_stat()))
        for name, st in entries:
            if target.virtual is not None:  # an area: shown as it is on disk (writable or not)
                child = self._target(posixpath.join(target.path, name).encode())
                st = await self._run(fs.stat_path, child)
                if not child.writable:
                    st = fs.read_only_stat(st)
            yield SFTPName(os.fsencode(name), attrs=self._attrs(st))

    async def setstat(self, path: bytes, attrs: SFTPAttrs) -> None:
        target = self._target(path)
        if attrs.size is not None:
            raise asyncssh.SFTPOpUnsupported("set a file's size on an open handle")
        if attrs.atime is not None and attrs.mtime is not None:
            await self._run(fs.set_times, target, float(attrs.atime), float(attrs.mtime))
        # Permissions and owners are the server's: a request to change them is ignored
        # (sftp's put -p sends them), not an error.

    async def fsetstat(self, file_obj: object, attrs: SFTPAttrs) -> None:
        handle = self._handle(file_obj)
        if attrs.size is not None:
            await self._run(fs.truncate, handle, attrs.size)
        if attrs.atime is not None and attrs.mtime is not None and handle.writable:
            os.utime(handle.fd, (float(attrs.atime), float(attrs.mtime)))

    async def lsetstat(self, path: bytes, attrs: SFTPAttrs) -> None:
        await self.setstat(path, attrs)

    async def statvfs(self, path: bytes) -> os.statvfs_result:
        self._target(path)
        return os.statvfs(self.shared)

    async def fstatvfs(self, file_obj: object) -> os.statvfs_result:
        self._handle(file_obj)
        return os.statvfs(self.shared)

    # ------------------------------------------------------------------ files
    async def open(self, path: bytes, pflags: int, attrs: SFTPAttrs) -> fs.Handle:
        target = self._target(path)
        write = bool(pflags & (asyncssh.FXF_WRITE | asyncssh.FXF_APPEND | asyncssh.FXF_CREAT
                               | asyncssh.FXF_TRUNC))
        handle = await self._run(lambda: fs.open_file(
            target, write=write, create=bool(pflags & asyncssh.FXF_CREAT), truncate=bool(pflags & asyncssh.FXF_TRUNC),
            exclusive=bool(pflags & asyncssh.FXF_EXCL), append=bool(pflags & asyncssh.FXF_APPEND), limit=self.limit))
        self.handles.add(handle)
        return handle

    def _handle(self, file_obj: object) -> fs.Handle:
        self.session.check()
        if not isinstance(file_obj, fs.Handle) or file_obj.fd < 0:
            raise asyncssh.SFTPInvalidHandle("not an open file")
        return file_obj

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        handle = self._handle(file_obj)
        size = min(size, INLINE_IO)
        return await self._run(os.pread, handle.fd, size, offset, inline=True)

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        handle = self._handle(file_obj)
        if not handle.writable:
            raise asyncssh.SFTPPermissionDenied("this file was opened for reading")
        await self._run(fs.write, handle, offset, data, inline=len(data) < INLINE_IO)
        return len(data)

    async def fsync(self, file_obj: object) -> None:
        await self._run(os.fsync, self._handle(file_obj).fd)

    def close(self, file_obj: object) -> None:
        if isinstance(file_obj, fs.Handle):
            file_obj.close()
            self.handles.discard(file_obj)

    # ------------------------------------------------------------------ folders and names
    async def _finished_attempt(self, target: Target) -> bool:
        """Whether ``target`` lies in the folder of one of the user's attempts that has
        ended (those may be deleted; a running one never). Asked of the log's projections
        at each delete, so an attempt started meanwhile is not touched."""
        if target.area != "jobs" or not target.parts:
            return False
        sid = target.parts[0]
        task_id, sep, number = sid.rpartition("--a")
        if not sep or not number.isdigit():
            return False
        view = await self.session.door.reads.task(task_id)
        if view is None or view.user != self.session.user_id:
            return False
        attempt = next((a for a in view.attempts if a.submission_id == sid), None)
        if attempt is None or not AttemptStatus(attempt.ray_status).is_terminal():
            raise asyncssh.SFTPPermissionDenied(f"{target.path}: attempt {sid} has not ended; "
                                                "only a finished attempt's folder may be deleted")
        return True

    async def remove(self, path: bytes) -> None:
        target = self._target(path)
        await self._run(fs.remove_file, target, await self._finished_attempt(target))

    async def mkdir(self, path: bytes, attrs: SFTPAttrs) -> None:
        await self._run(fs.make_dir, self._target(path))

    async def rmdir(self, path: bytes) -> None:
        target = self._target(path)
        await self._run(fs.remove_dir, target, await self._finished_attempt(target))

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        await self._run(lambda: fs.rename(self._target(oldpath), self._target(newpath), replace=False))

    async def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        await self._run(lambda: fs.rename(self._target(oldpath), self._target(newpath), replace=True))

    def readlink(self, path: bytes) -> bytes:
        self._target(path)
        raise asyncssh.SFTPPermissionDenied("Argus does not follow or show links in users' folders")

    def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        raise asyncssh.SFTPPermissionDenied("links cannot be made through Argus")

    def link(self, oldpath: bytes, newpath: bytes) -> None:
        raise asyncssh.SFTPPermissionDenied("links cannot be made through Argus")

    def exit(self) -> None:
        for handle in list(self.handles):
            handle.close()
        self.handles.clear()
        # An exit status, as OpenSSH's sftp-server gives: scp (over SFTP) fails without one.
        with contextlib.suppress(Exception):
            self.channel.exit(0)

