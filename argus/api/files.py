"""Data files: the caller's ``datasets/ models/ code/``, the shared ``common/datasets`` and
``common/hf`` (the same folders TaskSpecs name as ``$HOME/common/...``; read-only but to
admins), and ``jobs/``: what the caller's tasks wrote, one folder per attempt
(``<task_id>--aNN/``: driver.log, metrics, checkpoints, result.json), never written
through this API; a finished task's folders may be deleted (argus.service.outputs).

Every path is checked twice: textually, against the pattern the OpenAPI document states
(:mod:`argus.api.filepath`: ``/`` plain or as ``%2F``, no ``.`` or ``..``, no NUL,
backslash or ``%``, bounded lengths and depth), and on disk. A user's jobs
can write anything in that user's home (symlinks included), so no path is ever resolved
or re-walked by name: each component is opened relative to the folder above it without
following symlinks (:mod:`argus.safefs`), from ``<shared>/users`` (own areas, ``jobs``)
or ``<shared>`` (``common/*``), and reads, listings, uploads (a temp file then a rename in
the walked folder) and deletes act on those descriptors. A symlink anywhere is a 400 that
names it; a file where a folder is needed is a 400; anything missing a 404.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Sequence
from urllib.parse import quote

from litestar import Controller, Request, delete, get, put
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException, PermissionDeniedException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import Parameter

from argus import layout, safefs
from argus.api import jobfiles, quota
from argus.api.filepath import MAX_DEPTH, ReadPath, WritePath, check_path, url_path
from argus.api.auth import request_id
from argus.api.openapi import also_returns, errors
from argus.api.schemas import FileEntry, FileListing, FilesOverview
from argus.api.streams import Download
from argus.service import Commands, Principal
from argus.service import outputs

__all__ = ["FilesController", "byte_range", "check_dest", "dest_of", "publish", "user_usage"]

OWN_AREAS = layout.OWN_AREAS
COMMON_AREAS = layout.COMMON_AREAS
JOBS_AREA = layout.JOBS  # read-only: written by the caller's tasks, never through this API


class _Area:
    """An area: the operator's ``base`` folder (followed), the names under it down to the
    area's root (walked without following links), and how its paths are named."""

    def __init__(self, name: str, base: Path, top: list[str], writable: bool,
                 label: safefs.Label = safefs.jobs_label) -> None:
        self.name, self.base, self.top, self.writable, self.label = name, base, top, writable, label

    def names(self, parts: list[str]) -> list[str]:
        return [*self.top, *parts]


def _common_label(names: Sequence[str], i: int) -> str:
    return "common/" + "/".join(names[:i + 1])


def _split(shared: Path, user: str, rest: str, admin: bool = False) -> tuple[_Area, str]:
    """The area ``rest`` names and the path inside it; ``common/*`` is writable by admins
    (the curators of the shared datasets and model cache)."""
    rest = rest.lstrip("/")
    for prefix, folder in COMMON_AREAS.items():
        if rest == prefix or rest.startswith(prefix + "/"):
            # Walked from <shared>: a job that swaps <shared>/hf for a link is refused too.
            return _Area(prefix, shared, [folder], admin, _common_label), rest[len(prefix):].lstrip("/")
    head, _, tail = rest.partition("/")
    if head in OWN_AREAS or head == JOBS_AREA:
        return _Area(head, shared / layout.USERS, [user, head], head != JOBS_AREA), tail
    raise NotFoundException(f"unknown area {head!r}; use one of "
                            f"{', '.join([*OWN_AREAS, JOBS_AREA, *COMMON_AREAS])}")


def _read_only(area: _Area) -> PermissionDeniedException:
    if area.name == JOBS_AREA:
        return PermissionDeniedException(
            "jobs is written by your tasks: download from it, or delete a finished task's "
            "folders (argus files rm -r jobs/<folder>); upload to datasets/, models/ or code/")
    return PermissionDeniedException(f"{area.name} is read-only (admins may write it)")


def _parts(sub: str) -> list[str]:
    """The components of a path inside an area, already checked (argus.api.filepath)."""
    return [p for p in sub.split("/") if p]


def _refused(exc: safefs.Refused) -> HTTPException:
    retry = {"Retry-After": "60"} if exc.status == 507 else None  # a full disk: nothing was written
    return HTTPException(status_code=exc.status, detail=exc.detail, headers=retry)


def _disposition(name: str) -> str:
    """``attachment`` with the name: ASCII fallback and RFC 5987 form (a job may put any
    byte but ``/`` in a file name, newlines included)."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    encoded = quote(name.encode("utf-8", "surrogateescape"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range of ``Range: bytes=a-b`` (or ``a-``, ``-n``) as (start, end exclusive);
    None for no header or one this server ignores (several ranges, other units: the whole
    file is sent, as RFC 9110 allows). A range past the end is a 416."""
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()) or \
            (first and not first.isdigit()) or (last and not last.isdigit()):
        return None
    if not first:  # the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            raise _unsatisfiable(size)
        return max(0, size - n), size
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    if start >= size or end <= start:
        raise _unsatisfiable(size)
    return start, end


def _unsatisfiable(size: int) -> HTTPException:
    return HTTPException(status_code=416, detail=f"the range starts past the end: the file has "
                         f"{size} bytes", headers={"Content-Range": f"bytes */{size}"})


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_size:x}-{st.st_mtime_ns:x}"'


def _download(fd: int, st: os.stat_result, name: str, headers: Any) -> Download:
    """A file's bytes, or with ``Range`` the one range asked for (206; ``If-Range`` with
    another validator than the file's ETag gets the whole file)."""
    etag = _etag(st)
    wanted = headers.get("range")
    if_range = headers.get("if-range")
    try:
        span = byte_range(wanted, st.st_size) if not if_range or if_range == etag else None
    except HTTPException:
        os.close(fd)
        raise
    out = {"Content-Disposition": _disposition(name), "Accept-Ranges": "bytes", "ETag": etag}
    if span is None:
        return Download(jobfiles.read_chunks(fd, st.st_size),
                        headers={**out, "Content-Length": str(st.st_size)})
    start, end = span
    os.lseek(fd, start, os.SEEK_SET)
    return Download(jobfiles.read_chunks(fd, end - start), status_code=206, headers={
        **out, "Content-Length": str(end - start),
        "Content-Range": f"bytes {start}-{end - 1}/{st.st_size}"})


async def _read(area: _Area, parts: list[str], headers: Any) -> Any:
    """A folder (listing, links shown as ``link``, never followed) or a regular file
    (streamed, up to its size when opened; one byte range when asked), walked from the
    area's base."""
    names = area.names(parts)
    try:
        if area.writable and not parts:  # an own area is made on first look (mkdirat)
            fd = await asyncio.to_thread(safefs.open_dir, area.base, names, area.label)
            st = os.fstat(fd)
        else:
            fd, st = await asyncio.to_thread(safefs.walk, area.base, names, area.label)
    except safefs.Refused as exc:
        if exc.status == 404 and not parts and area.name == JOBS_AREA:  # no task has run yet
            return FileListing(area=JOBS_AREA, path="", entries=[])
        raise _refused(exc) from exc
    if stat.S_ISDIR(st.st_mode):
        try:
            entries, truncated = await asyncio.to_thread(jobfiles.list_dir, fd)
        finally:
            os.close(fd)
        return FileListing(area=area.name, path="/".join(parts), entries=entries,
                           truncated=truncated)
    return _download(fd, st, parts[-1], headers)


def _parent(area: _Area, parts: list[str], create: bool) -> int:
    """The fd of the folder holding ``parts[-1]``: walked without following links, its
    missing folders made when ``create`` (an own area's root included)."""
    names = area.names(parts[:-1])
    return safefs.open_dir(area.base, names, area.label,
                           create_from=0 if create else len(names))


async def _remove_output(request: Request[Any, Any, Any], commands: Commands, who: Principal, parts: list[str],
                         recursive: bool) -> FileEntry:
    """``DELETE /files/jobs/...``: a finished task's files (argus.service.outputs); ``size``:
    the bytes freed."""
    try:
        is_dir, removal = await outputs.remove_output(commands, who, parts, recursive,
                                                      request_id(request))
    except safefs.Refused as exc:
        raise _refused(exc) from exc
    if not removal.complete:
        raise HTTPException(status_code=409, detail=(
            f"jobs/{'/'.join(parts)}: {removal.entries} entries ({removal.bytes} bytes) deleted, "
            "more remain (a tree too large for one request): run the same delete again"))
    return FileEntry(name=parts[-1], is_dir=is_dir, size=removal.bytes, modified=0.0,
                     type="dir" if is_dir else "file")


def _too_big(size: int, limit: int) -> HTTPException:
    return HTTPException(status_code=413, detail=(
        f"{quota.human(size)} is larger than the {quota.human(limit)} one PUT takes "
        "(v2.api.max_upload_bytes); upload it resumably instead: `argus files put` or the tus "
        "protocol at /api/v2/uploads (docs/api.md)"))


def _summary(usage: quota.Usage) -> str:
    used = quota.human(usage.used_bytes + usage.staged_bytes)
    if not usage.limit_bytes:
        return f"{used} used (no limit)"
    return f"{used} of {quota.human(usage.limit_bytes)} used, {quota.human(usage.free or 0)} free"


async def user_usage(state: State, user: str, fresh: bool = False) -> quota.Usage:
    """The user's storage: own areas (cached walk) plus uploads in progress."""
    used, exact = await asyncio.to_thread(state.usage.get, user, fresh)
    staged = await asyncio.to_thread(state.staging.of_user, user)
    return quota.Usage(used_bytes=used, staged_bytes=sum(i.length for i in staged),
                       limit_bytes=quota.limit_for(state.config.v2.files, user), exact=exact)


def dest_of(shared: Path, user: str, rest: str) -> tuple[_Area, list[str]]:
    """A writable destination file ``rest`` (area/path): its area and parts, checked as an
    upload's are (the document's write pattern; no disk access); 400/403/404 otherwise."""
    area, sub = _split(shared, user, check_path(rest, write=True))
    if not area.writable:
        raise _read_only(area)
    return area, _parts(sub)


def check_dest(area: _Area, parts: list[str]) -> None:
    """Refuse (:class:`safefs.Refused`) a destination that cannot be written: a link or a
    file on the way, or a folder where the file would go. Blocking; writes nothing."""
    names = area.names(parts)
    for depth in range(len(area.top), len(names) + 1):
        try:
            fd, st = safefs.walk(area.base, names[:depth], area.label)
        except safefs.Refused as exc:
            if exc.status == 404:
                return  # made when the file is published
            raise
        os.close(fd)
        if depth < len(names) and not stat.S_ISDIR(st.st_mode):
            raise safefs.Refused(400, f"{area.label(names, depth - 1)} is a file, not a folder; "
                                 "choose another path")
        if depth == len(names) and stat.S_ISDIR(st.st_mode):
            raise safefs.Refused(400, f"{area.label(names, depth - 1)} is a folder; name a file "
                                 "inside it")


def publish(area: _Area, parts: list[str], src_dir: Path, src_name: str) -> os.stat_result:
    """Move the finished upload ``src_dir/src_name`` to its place (``renameat`` into the
    walked parent, folders made; an existing file replaced, never a folder). Blocking."""
    parent = _parent(area, parts, create=True)
    what = area.label(area.names(parts), len(area.top) + len(parts) - 1)
    try:
        st = safefs.entry(parent, parts[-1], what)  # a link refused, never followed
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise safefs.Refused(409, f"{what} is a folder now; remove it, then send the "
                                 "upload's last request again")
        src = os.open(src_dir, safefs.DIR_FLAGS)
        try:
            os.rename(src_name, parts[-1], src_dir_fd=src, dst_dir_fd=parent)
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except OSError as exc:
            raise safefs.Refused(409, f"cannot write {what}: {exc.strerror}") from exc
        finally:
            os.close(src)
    finally:
        os.close(parent)


@dataclass
class _UploadOperation(Operation):
    def __post_init__(self) -> None:
        self.request_body = RequestBody(required=True, content={
            "application/octet-stream": OpenAPIMediaType(
                schema=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY))})


class FilesController(Controller):
    path = "/files"
    tags = ["files"]

    @get("/")
    async def areas(self, state: State, who: Principal) -> FilesOverview:
        """The areas: own (writable), jobs and common (read-only); the caller's storage
        against their limit."""
        usage = await user_usage(state, who.user_id)
        return FilesOverview(areas=[*OWN_AREAS, JOBS_AREA, *COMMON_AREAS],
                             used_bytes=usage.used_bytes, staged_bytes=usage.staged_bytes,
                             limit_bytes=usage.limit_bytes, exact=usage.exact,
                             summary=_summary(usage))

    @get("/{rest:path}", responses=errors(400, 403, 404, 409, 416),
         opt=also_returns("application/octet-stream"))
    async def read(self, request: Request[Any, Any, Any], state: State, who: Principal,
                   rest: ReadPath) -> Any:
        """A directory: its listing (JSON, at most 1000 entries). A file: its bytes (one
        ``Range`` honoured: 206, or 416 past the end)."""
        area, sub = _split(Path(state.config.shared_root), who.user_id, url_path(request, rest))
        return await _read(area, _parts(sub), request.headers)

    @put("/{rest:path}", operation_class=_UploadOperation, status_code=201,
         request_max_body_size=None, responses=errors(403, 404, 409))
    async def upload(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     rest: WritePath) -> FileEntry:
        """Upload a file (streamed; at most v2.api.max_upload_bytes) into an own area (an
        admin: into common/datasets and common/hf too)."""
        path = url_path(request, rest, write=True)
        area, sub = _split(Path(state.config.shared_root), who.user_id, path, who.is_admin)
        if not area.writable:  # before any disk access
            raise _read_only(area)
        parts = _parts(sub)
        limit = state.config.v2.api.max_upload_bytes
        declared = request.headers.get("content-length")
        # Refused before a byte of the body is read: a client that sent
        # `Expect: 100-continue` never gets its 100 and sends nothing.
        if declared and declared.isdigit():
            if int(declared) > limit:
                raise _too_big(int(declared), limit)
            usage = await user_usage(state, who.user_id)
            refusal = quota.no_room(path, int(declared), usage)
            if refusal:
                raise HTTPException(status_code=413, detail=refusal)
        what = area.label(area.names(parts), len(area.top) + len(parts) - 1)
        try:
            out = await asyncio.to_thread(
                lambda: safefs.AtomicWrite(_parent(area, parts, create=True), parts[-1], what))
        except safefs.Refused as exc:
            raise _refused(exc) from exc
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_big(size, limit)
                await asyncio.to_thread(out.write, chunk) if len(chunk) > 1 << 20 else out.write(chunk)
            st = await asyncio.to_thread(out.commit)
            state.usage.forget(who.user_id)
        except BaseException as exc:
            out.abort()  # the temp file: nothing is left behind
            if isinstance(exc, safefs.Refused):
                raise _refused(exc) from exc
            raise
        return FileEntry(name=parts[-1], is_dir=False, size=st.st_size, modified=st.st_mtime)

    @delete("/{rest:path}", status_code=200, responses=errors(400, 403, 404, 409))
    async def remove(self, request: Request[Any, Any, Any], state: State, commands: Commands, who: Principal,
                     rest: WritePath,
                     recursive: Annotated[bool, Parameter(description="delete a folder")] = False) -> FileEntry:
        """Delete a file (or, with ``recursive``, a folder) in an own area, or what a
        finished task wrote under jobs/ (recorded as AttemptOutputsRemoved); an admin: in
        common/ too."""
        path = url_path(request, rest, write=True)
        area, sub = _split(Path(state.config.shared_root), who.user_id, path, who.is_admin)
        parts = _parts(sub)
        if area.name == JOBS_AREA:
            return await _remove_output(request, commands, who, parts, recursive)
        if not area.writable:
            raise _read_only(area)
        what = area.label(area.names(parts), len(area.top) + len(parts) - 1)
        try:
            is_dir = await asyncio.to_thread(
                lambda: safefs.remove(_parent(area, parts, create=False), parts[-1], what, recursive))
        except safefs.Refused as exc:
            raise _refused(exc) from exc
        state.usage.forget(who.user_id)
        return FileEntry(name=parts[-1], is_dir=is_dir, size=0, modified=0.0,
                         type="dir" if is_dir else "file")
