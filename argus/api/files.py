"""Data files: the caller's ``datasets/ models/ code/``, the shared read-only
``common/datasets`` and ``common/hf`` (the same folders TaskSpecs name as
``$HOME/common/...``), and the read-only ``jobs/``: what the caller's tasks wrote, one
folder per attempt (``<task_id>--aNN/``: driver.log, metrics, checkpoints, result.json).

Every path is checked twice: textually (no ``..``, no absolute path, no NUL or
backslash, after URL decoding) and on disk. In the writable and common areas, after
resolving symlinks (it must stay inside the area's root). In ``jobs/``, which the
caller's jobs write (symlinks included), each component is opened without following
symlinks (:func:`argus.api.jobfiles.walk`): a symlink is a 400 that names it. Anything
else is a 400 (or 404 when it does not exist).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Controller, Request, delete, get, put
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException, PermissionDeniedException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import Parameter
from litestar.response import File
from dataclasses import dataclass

from argus.api import jobfiles
from argus.api.schemas import FileEntry, FileListing
from argus.api.streams import Download
from argus.service import Principal

__all__ = ["FilesController", "resolve"]

OWN_AREAS = ("datasets", "models", "code")
COMMON_AREAS = {"common/datasets": "datasets", "common/hf": "hf"}
JOBS_AREA = "jobs"  # read-only: written by the caller's tasks, never through this API


class _Area:
    def __init__(self, name: str, root: Path, writable: bool) -> None:
        self.name, self.root, self.writable = name, root, writable


def _split(shared: Path, user: str, rest: str) -> tuple[_Area, str]:
    rest = rest.lstrip("/")
    for prefix, folder in COMMON_AREAS.items():
        if rest == prefix or rest.startswith(prefix + "/"):
            return _Area(prefix, shared / folder, False), rest[len(prefix):].lstrip("/")
    head, _, tail = rest.partition("/")
    if head in OWN_AREAS:
        return _Area(head, shared / "users" / user / head, True), tail
    if head == JOBS_AREA:
        return _Area(head, shared / "users" / user / head, False), tail
    raise NotFoundException(f"unknown area {head!r}; use one of "
                            f"{', '.join([*OWN_AREAS, JOBS_AREA, *COMMON_AREAS])}")


def _read_only(area: _Area) -> PermissionDeniedException:
    if area.name == JOBS_AREA:
        return PermissionDeniedException(
            "jobs is read-only: your tasks write it (download from it; upload to datasets/, "
            "models/ or code/)")
    return PermissionDeniedException(f"{area.name} is read-only")


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
    return parts


def resolve(shared: Path, user: str, rest: str) -> tuple[_Area, Path]:
    """The area and the real path of ``rest``; 400 for any path that could escape it."""
    area, sub = _split(shared, user, rest)
    parts = _parts(sub)
    root = area.root.resolve()
    target = root.joinpath(*parts).resolve()
    if target != root and root not in target.parents:
        raise HTTPException(status_code=400, detail="path leaves the area (through a symlink?)")
    return area, target


def _listing(area: _Area, target: Path, rel: str) -> FileListing:
    entries: list[FileEntry] = []
    truncated = False
    with os.scandir(target) as it:
        for e in it:
            if len(entries) >= jobfiles.MAX_LISTING:
                truncated = True
                break
            try:
                st = e.stat()
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            name = e.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            entries.append(FileEntry(name=name, is_dir=is_dir, size=0 if is_dir else st.st_size,
                                     modified=st.st_mtime, type="dir" if is_dir else "file"))
    entries.sort(key=lambda e: e.name)
    return FileListing(area=area.name, path=rel, entries=entries, truncated=truncated)


def _disposition(name: str) -> str:
    """``attachment`` with the name: ASCII fallback and RFC 5987 form (a job may put any
    byte but ``/`` in a file name, newlines included)."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    encoded = quote(name.encode("utf-8", "surrogateescape"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


async def _read_job(shared: Path, user: str, parts: list[str]) -> Any:
    """A folder of the jobs area (listing) or a file (streamed, up to its size now)."""
    try:
        fd, st = await asyncio.to_thread(jobfiles.walk, shared / "users", [user, JOBS_AREA, *parts])
    except jobfiles.Refused as exc:
        if exc.status == 404 and not parts:  # no task has run yet
            return FileListing(area=JOBS_AREA, path="", entries=[])
        raise HTTPException(status_code=exc.status, detail=exc.detail) from exc
    if stat.S_ISDIR(st.st_mode):
        try:
            entries, truncated = await asyncio.to_thread(jobfiles.list_dir, fd)
        finally:
            os.close(fd)
        return FileListing(area=JOBS_AREA, path="/".join(parts), entries=entries,
                           truncated=truncated)
    return Download(jobfiles.read_chunks(fd, st.st_size),
                     headers={"Content-Disposition": _disposition(parts[-1]),
                              "Content-Length": str(st.st_size)})


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

    @get("/{rest:path}")
    async def read(self, request: Request[Any, Any, Any], state: State, who: Principal,
                   rest: str) -> Any:
        """A directory: its listing (JSON, at most 1000 entries). A file: its bytes."""
        check_raw(request)
        shared = Path(state.config.shared_root)
        if rest.strip("/") in OWN_AREAS:
            state.commands.ensure_user_dirs(who.user_id)
        area, sub = _split(shared, who.user_id, rest)
        if area.name == JOBS_AREA:
            return await _read_job(shared, who.user_id, _parts(sub))
        area, target = resolve(shared, who.user_id, rest)
        if target.is_dir():
            return _listing(area, target, str(target.relative_to(area.root.resolve())))
        if not target.is_file():
            raise NotFoundException(f"{rest} not found")
        return File(path=target, filename=target.name, media_type="application/octet-stream")

    @put("/{rest:path}", operation_class=_UploadOperation, status_code=201,
         request_max_body_size=None)
    async def upload(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     rest: str) -> FileEntry:
        """Upload a file (streamed; at most v2.api.max_upload_bytes) into an own area."""
        check_raw(request)
        shared = Path(state.config.shared_root)
        if not (area := _split(shared, who.user_id, rest)[0]).writable:  # before any disk access
            raise _read_only(area)
        area, target = resolve(shared, who.user_id, rest)
        if target == area.root.resolve() or target.is_dir():
            raise HTTPException(status_code=400, detail="name a file inside the area, not a folder")
        limit = state.config.v2.api.max_upload_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise HTTPException(status_code=413, detail=f"file larger than {limit} bytes")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(status_code=413, detail=f"file larger than {limit} bytes")
                    await asyncio.to_thread(out.write, chunk) if len(chunk) > 1 << 20 else out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        st = target.stat()
        return FileEntry(name=target.name, is_dir=False, size=st.st_size, modified=st.st_mtime)

    @delete("/{rest:path}", status_code=200)
    async def remove(self, request: Request[Any, Any, Any], state: State, who: Principal, rest: str,
                     recursive: Annotated[bool, Parameter(description="delete a folder")] = False) -> FileEntry:
        """Delete a file (or, with ``recursive``, a folder) in an own area."""
        check_raw(request)
        shared = Path(state.config.shared_root)
        if not (area := _split(shared, who.user_id, rest)[0]).writable:
            raise _read_only(area)
        area, target = resolve(shared, who.user_id, rest)
        if target == area.root.resolve():
            raise HTTPException(status_code=400, detail="cannot delete an area itself")
        if not target.exists():
            raise NotFoundException(f"{rest} not found")
        is_dir = target.is_dir()
        entry = FileEntry(name=target.name, is_dir=is_dir, size=0, modified=0.0,
                          type="dir" if is_dir else "file")
        if is_dir:
            if not recursive:
                raise HTTPException(status_code=400, detail="a folder: add ?recursive=true")
            await asyncio.to_thread(shutil.rmtree, target)
        else:
            target.unlink()
        return entry
