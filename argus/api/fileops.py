"""Housekeeping in a user's own areas (``datasets/ models/ code/``): make a folder, rename
or move a file or folder. Deleting is ``DELETE /files/...`` (argus.api.files).

Both ends are walked from ``<shared>/users`` one component at a time without following a
link (:mod:`argus.safefs`), and the move is one ``renameat`` between the two walked
parents: a link a job planted on the way is refused, never followed.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from litestar import Controller, Request, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException

from argus import safefs
from argus.api import files
from argus.api.filepath import WritePath, url_path
from argus.api.openapi import errors
from argus.api.schemas import FileEntry, FileOpIn
from argus.service import Principal

__all__ = ["FileOpsController"]


def _mkdir(area: Any, parts: list[str]) -> os.stat_result:
    fd = safefs.open_dir(area.base, area.names(parts), area.label)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _move(src: tuple[Any, list[str]], dst: tuple[Any, list[str]]) -> os.stat_result:
    (sa, sp), (da, dp) = src, dst
    s_what = sa.label(sa.names(sp), len(sa.top) + len(sp) - 1)
    d_what = da.label(da.names(dp), len(da.top) + len(dp) - 1)
    if sa.name == da.name and dp[:len(sp)] == sp:
        raise safefs.Refused(400, f"cannot move {s_what} into itself; choose a destination "
                             "outside it")
    s_parent = files._parent(sa, sp, create=False)
    try:
        st = safefs.entry(s_parent, sp[-1], s_what)
        if st is None:
            raise safefs.Refused(404, f"{s_what} not found")
        d_parent = files._parent(da, dp, create=True)
        try:
            if safefs.entry(d_parent, dp[-1], d_what) is not None:
                raise safefs.Refused(409, f"{d_what} already exists; delete it first or choose "
                                     "another name")
            try:
                os.rename(sp[-1], dp[-1], src_dir_fd=s_parent, dst_dir_fd=d_parent)
            except OSError as exc:
                raise safefs.Refused(409, f"cannot move {s_what}: {exc.strerror}") from exc
            return os.stat(dp[-1], dir_fd=d_parent, follow_symlinks=False)
        finally:
            os.close(d_parent)
    finally:
        os.close(s_parent)


class FileOpsController(Controller):
    path = "/files"
    tags = ["files"]

    @post("/{rest:path}", status_code=201, responses=errors(400, 403, 404, 409))
    async def operate(self, request: Request[Any, Any, Any], state: State, who: Principal,
                      rest: WritePath, data: FileOpIn) -> FileEntry:
        """``{"op": "mkdir"}`` makes the folder (and those above it); ``{"op": "move",
        "to": "area/path"}`` renames or moves a file or folder within your own areas (the
        destination must not exist)."""
        shared = Path(state.config.shared_root)
        area, parts = files.dest_of(shared, who.user_id, url_path(request, rest, write=True))
        try:
            if data.op == "mkdir":
                st = await asyncio.to_thread(_mkdir, area, parts)
                name = parts[-1]
            elif data.op == "move":
                if not data.to:
                    raise HTTPException(status_code=400, detail="move needs 'to': the new "
                                        "area/path, e.g. datasets/new-name")
                dst = files.dest_of(shared, who.user_id, data.to)
                st = await asyncio.to_thread(_move, (area, parts), dst)
                name = dst[1][-1]
            else:
                raise HTTPException(status_code=400, detail=f"unknown op {data.op!r}; use "
                                    "'mkdir' or 'move'")
        except safefs.Refused as exc:
            raise HTTPException(status_code=exc.status, detail=exc.detail) from exc
        is_dir = stat.S_ISDIR(st.st_mode)
        return FileEntry(name=name, is_dir=is_dir, type="dir" if is_dir else "file",
                         size=0 if is_dir else st.st_size, modified=st.st_mtime)
