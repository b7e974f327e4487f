"""Data files: the caller's ``datasets/ models/ code/`` and the shared read-only
``common/datasets`` and ``common/hf`` (the same folders TaskSpecs name as
``$HOME/common/...``).

Every path is checked twice: textually (no ``..``, no absolute path, no NUL or
backslash, after URL decoding) and after resolving symlinks (it must stay inside the
area's root). Anything else is a 400 (or 404 when it does not exist).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

from litestar import Controller, Request, delete, get, put
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException, PermissionDeniedException
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import Parameter
from litestar.response import File
from dataclasses import dataclass

from argus.api.schemas import FileEntry, FileListing
from argus.service import Principal

__all__ = ["FilesController", "resolve"]

OWN_AREAS = ("datasets", "models", "code")
COMMON_AREAS = {"common/datasets": "datasets", "common/hf": "hf"}


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
    raise NotFoundException(f"unknown area {head!r}; use one of "
                            f"{', '.join([*OWN_AREAS, *COMMON_AREAS])}")


def check_raw(request: Request[Any, Any, Any]) -> None:
    """Refuse what the router would silently normalise: ``//`` (an absolute path) and
    encoded separators or dots."""
    raw = request.scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0].lower()
    tail = raw.split("/files", 1)[-1]
    if "//" in tail or any(code in tail for code in ("%2f", "%2e", "%5c", "%00", "%25")):
        raise HTTPException(status_code=400, detail="path must be relative, without '//' or "
                            "encoded '/', '.', '\\' or '%'")


def resolve(shared: Path, user: str, rest: str) -> tuple[_Area, Path]:
    """The area and the real path of ``rest``; 400 for any path that could escape it."""
    area, sub = _split(shared, user, rest)
    if "\x00" in sub or "\\" in sub or sub.startswith("/") or "%" in sub:
        raise HTTPException(status_code=400, detail="path must be relative, without NUL, "
                            "backslash or percent-encoding")
    parts = [p for p in sub.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise HTTPException(status_code=400, detail="path must not contain '..'")
    if any(len(p) > 255 for p in parts) or len(sub) > 4096:
        raise HTTPException(status_code=400, detail="path or file name too long")
    root = area.root.resolve()
    target = root.joinpath(*parts).resolve()
    if target != root and root not in target.parents:
        raise HTTPException(status_code=400, detail="path leaves the area (through a symlink?)")
    return area, target


def _listing(area: _Area, target: Path, rel: str) -> FileListing:
    entries = []
    with os.scandir(target) as it:
        for e in sorted(it, key=lambda e: e.name):
            try:
                st = e.stat()
            except OSError:
                continue
            entries.append(FileEntry(name=e.name, is_dir=e.is_dir(), size=0 if e.is_dir() else st.st_size,
                                     modified=st.st_mtime))
    return FileListing(area=area.name, path=rel, entries=entries)


@dataclass
class _UploadOperation(Operation):
    def __post_init__(self) -> None:
        self.request_body = RequestBody(required=True, content={
            "application/octet-stream": OpenAPIMediaType(
                schema=Schema(type=OpenAPIType.STRING, format="binary"))})


class FilesController(Controller):
    path = "/files"
    tags = ["files"]

    @get("/")
    async def areas(self, who: Principal) -> list[str]:
        """The areas: own (writable) and common (read-only)."""
        return [*OWN_AREAS, *COMMON_AREAS]

    @get("/{rest:path}")
    async def read(self, request: Request[Any, Any, Any], state: State, who: Principal,
                   rest: str) -> Any:
        """A directory: its listing (JSON). A file: its bytes."""
        check_raw(request)
        shared = Path(state.config.shared_root)
        if rest.strip("/") in OWN_AREAS:
            state.commands.ensure_user_dirs(who.user_id)
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
        area, target = resolve(Path(state.config.shared_root), who.user_id, rest)
        if not area.writable:
            raise PermissionDeniedException(f"{area.name} is read-only")
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
        area, target = resolve(Path(state.config.shared_root), who.user_id, rest)
        if not area.writable:
            raise PermissionDeniedException(f"{area.name} is read-only")
        if target == area.root.resolve():
            raise HTTPException(status_code=400, detail="cannot delete an area itself")
        if not target.exists():
            raise NotFoundException(f"{rest} not found")
        entry = FileEntry(name=target.name, is_dir=target.is_dir(), size=0, modified=0.0)
        if target.is_dir():
            if not recursive:
                raise HTTPException(status_code=400, detail="a folder: add ?recursive=true")
            await asyncio.to_thread(shutil.rmtree, target)
        else:
            target.unlink()
        return entry
