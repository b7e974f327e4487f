"""Data files: the caller's ``datasets/ models/ code/``, the shared ``common/datasets`` and
``common/hf`` (the same folders TaskSpecs name as ``$HOME/common/...``; read-only but to
admins), and ``jobs/``: what the caller's tasks wrote, one folder per attempt
(``<task_id>--aNN/``: driver.log, metrics, checkpoints, result.json), never written
through this API; a finished task's folders may be deleted (argus.service.outputs).

Every path is checked twice: textually (no ``..``, no absolute path, no NUL or
backslash, after URL decoding; at most ``MAX_DEPTH`` components) and on disk. A user's jobs
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

from argus import safefs
from argus.api import jobfiles
from argus.api.auth import request_id
from argus.api.openapi import also_returns, errors
from argus.api.schemas import FileEntry, FileListing
from argus.api.streams import Download
from argus.service import Principal
from argus.service import outputs

__all__ = ["FilesController"]

OWN_AREAS = ("datasets", "models", "code")
COMMON_AREAS = {"common/datasets": "datasets", "common/hf": "hf"}
JOBS_AREA = "jobs"  # read-only: written by the caller's tasks, never through this API
MAX_DEPTH = 64  # components below an area; deeper is a 400, never walked
# A file's path as its schema says it (check_raw and _parts enforce it, with messages that
# say what to change). An OpenAPI path parameter is one segment (a '/' in its value is
# sent encoded, as %2F, which the API refuses: an encoded separator is never a folder), so
# the schema says one component: 1-255 characters without a backslash, '%' or NUL. The
# URL may hold several, each such, separated by plain '/'.
PATH_PATTERN = r"^[^/\\%\x00]{1,255}$"
FilePath = Annotated[str, Parameter(
    description="an area (datasets, models, code, jobs, common) and, after plain '/' separators, "
                "a path in it: components of 1-255 characters without a backslash, '%' or NUL",
    schema_extra={"pattern": PATH_PATTERN})]


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
        return _Area(head, shared / "users", [user, head], head != JOBS_AREA), tail
    raise NotFoundException(f"unknown area {head!r}; use one of "
                            f"{', '.join([*OWN_AREAS, JOBS_AREA, *COMMON_AREAS])}")


def _read_only(area: _Area) -> PermissionDeniedException:
    if area.name == JOBS_AREA:
        return PermissionDeniedException(
            "jobs is written by your tasks: download from it, or delete a finished task's "
            "folders (argus files rm -r jobs/<folder>); upload to datasets/, models/ or code/")
    return PermissionDeniedException(f"{area.name} is read-only (admins may write it)")


def check_raw(request: Request[Any, Any, Any]) -> None:
    """Refuse what the router would silently normalise: ``//`` (an absolute path) and
    encoded separators or dots."""
    raw = request.scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0].lower()
    tail = raw.split("/files", 1)[-1]
    if "//" in tail or any(code in tail for code in ("%2f", "%2e", "%5c", "%00", "%25")):
        raise HTTPException(status_code=400, detail="path must be relative, without '//' or "
                            "encoded '/', '.', '\\' or '%'")


def _parts(sub: str) -> list[str]:
    """The components of a path inside an area; 400 for one that could escape it."""
    if "\x00" in sub or "\\" in sub or sub.startswith("/") or "%" in sub:
        raise HTTPException(status_code=400, detail="path must be relative, without NUL, "
                            "backslash or percent-encoding")
    parts = [p for p in sub.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise HTTPException(status_code=400, detail="path must not contain '..'")
    if any(len(p) > 255 for p in parts) or len(sub) > 4096:
        raise HTTPException(status_code=400, detail="path or file name too long")
    if len(parts) > MAX_DEPTH:
        raise HTTPException(status_code=400, detail=f"path too deep: at most {MAX_DEPTH} "
                            "folders and a file below an area")
    return parts


def _refused(exc: safefs.Refused) -> HTTPException:
    retry = {"Retry-After": "60"} if exc.status == 507 else None  # a full disk: nothing was written
    return HTTPException(status_code=exc.status, detail=exc.detail, headers=retry)


def _disposition(name: str) -> str:
    """``attachment`` with the name: ASCII fallback and RFC 5987 form (a job may put any
    byte but ``/`` in a file name, newlines included)."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    encoded = quote(name.encode("utf-8", "surrogateescape"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


async def _read(area: _Area, parts: list[str]) -> Any:
    """A folder (listing, links shown as ``link``, never followed) or a regular file
    (streamed, up to its size when opened), walked from the area's base."""
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
    return Download(jobfiles.read_chunks(fd, st.st_size),
                    headers={"Content-Disposition": _disposition(parts[-1]),
                             "Content-Length": str(st.st_size)})


def _parent(area: _Area, parts: list[str], create: bool) -> int:
    """The fd of the folder holding ``parts[-1]``: walked without following links, its
    missing folders made when ``create`` (an own area's root included)."""
    names = area.names(parts[:-1])
    return safefs.open_dir(area.base, names, area.label,
                           create_from=0 if create else len(names))


async def _remove_output(request: Request[Any, Any, Any], state: State, who: Principal, parts: list[str],
                         recursive: bool) -> FileEntry:
    """``DELETE /files/jobs/...``: a finished task's files (argus.service.outputs); ``size``:
    the bytes freed."""
    try:
        is_dir, removal = await outputs.remove_output(state.commands, who, parts, recursive,
                                                      request_id(request))
    except safefs.Refused as exc:
        raise _refused(exc) from exc
    if not removal.complete:
        raise HTTPException(status_code=409, detail=(
            f"jobs/{'/'.join(parts)}: {removal.entries} entries ({removal.bytes} bytes) deleted, "
            "more remain (a tree too large for one request): run the same delete again"))
    return FileEntry(name=parts[-1], is_dir=is_dir, size=removal.bytes, modified=0.0,
                     type="dir" if is_dir else "file")


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
    async def areas(self, who: Principal) -> list[str]:
        """The areas: own (writable), jobs and common (read-only)."""
        return [*OWN_AREAS, JOBS_AREA, *COMMON_AREAS]

    @get("/{rest:path}", responses=errors(400, 403, 404, 409),
         opt=also_returns("application/octet-stream"))
    async def read(self, request: Request[Any, Any, Any], state: State, who: Principal,
                   rest: FilePath) -> Any:
        """A directory: its listing (JSON, at most 1000 entries). A file: its bytes."""
        check_raw(request)
        area, sub = _split(Path(state.config.shared_root), who.user_id, rest)
        return await _read(area, _parts(sub))

    @put("/{rest:path}", operation_class=_UploadOperation, status_code=201,
         request_max_body_size=None, responses=errors(403, 404, 409))
    async def upload(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     rest: FilePath) -> FileEntry:
        """Upload a file (streamed; at most v2.api.max_upload_bytes) into an own area (an
        admin: into common/datasets and common/hf too)."""
        check_raw(request)
        area, sub = _split(Path(state.config.shared_root), who.user_id, rest, who.is_admin)
        if not area.writable:  # before any disk access
            raise _read_only(area)
        parts = _parts(sub)
        if not parts:
            raise HTTPException(status_code=400, detail="name a file inside the area, not a folder")
        limit = state.config.v2.api.max_upload_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise HTTPException(status_code=413, detail=f"file larger than {limit} bytes")
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
                    raise HTTPException(status_code=413, detail=f"file larger than {limit} bytes")
                await asyncio.to_thread(out.write, chunk) if len(chunk) > 1 << 20 else out.write(chunk)
            st = await asyncio.to_thread(out.commit)
        except BaseException as exc:
            out.abort()  # the temp file: nothing is left behind
            if isinstance(exc, safefs.Refused):
                raise _refused(exc) from exc
            raise
        return FileEntry(name=parts[-1], is_dir=False, size=st.st_size, modified=st.st_mtime)

    @delete("/{rest:path}", status_code=200, responses=errors(400, 403, 404, 409))
    async def remove(self, request: Request[Any, Any, Any], state: State, who: Principal, rest: FilePath,
                     recursive: Annotated[bool, Parameter(description="delete a folder")] = False) -> FileEntry:
        """Delete a file (or, with ``recursive``, a folder) in an own area, or what a
        finished task wrote under jobs/ (recorded as AttemptOutputsRemoved); an admin: in
        common/ too."""
        check_raw(request)
        area, sub = _split(Path(state.config.shared_root), who.user_id, rest, who.is_admin)
        parts = _parts(sub)
        if area.name == JOBS_AREA and parts:
            return await _remove_output(request, state, who, parts, recursive)
        if not area.writable:
            raise _read_only(area)
        if not parts:
            raise HTTPException(status_code=400, detail="cannot delete an area itself")
        what = area.label(area.names(parts), len(area.top) + len(parts) - 1)
        try:
            is_dir = await asyncio.to_thread(
                lambda: safefs.remove(_parent(area, parts, create=False), parts[-1], what, recursive))
        except safefs.Refused as exc:
            raise _refused(exc) from exc
        return FileEntry(name=parts[-1], is_dir=is_dir, size=0, modified=0.0,
                         type="dir" if is_dir else "file")
