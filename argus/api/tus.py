"""Resumable uploads: the tus protocol 1.0.0 (https://tus.io/protocols/resumable-upload),
core plus the creation, checksum, expiration and termination extensions, at
``/api/v2/uploads``. Written here because no maintained Python tus server fits Litestar.

- ``POST`` creates an upload: ``Upload-Length`` (required: the size is known before a byte
  is sent, so a file that cannot fit is refused at once, in human units) and
  ``Upload-Metadata`` with ``path`` (area/path) and optionally ``sha256`` (hex, of the
  whole file). 201 with ``Location``.
- ``HEAD`` says how much the server has (``Upload-Offset``); the client goes on from there.
- ``PATCH`` appends one chunk at ``Upload-Offset``, streamed to disk through a bounded
  buffer. A chunk counts only when it arrived whole and its ``Upload-Checksum`` (when
  sent) matches; a cut-off or corrupted chunk leaves the offset where it was (460 for a
  mismatch). The PATCH that carries the last byte may declare the whole file's sha256 in
  ``Argus-File-Sha256`` (so a client hashes while it sends, not in a pass before). With the
  last byte the whole file's sha256 is checked against every digest declared (at creation,
  on that PATCH) and only then is it renamed to its name; a wrong sha256 is a 460 and the
  upload is gone.
- ``DELETE`` drops an upload. Unfinished uploads expire (``Upload-Expires``) and are swept.

Uploads wait in :mod:`argus.api.staging`, counted against the user's limit.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import time
from email.utils import formatdate
from pathlib import Path
from typing import Annotated, Any, AsyncIterator

from litestar import Controller, Request, Response, delete, head, patch, post, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.params import Parameter

from argus import safefs
from argus.api import files, quota
from argus.api.openapi import errors
from argus.api.staging import CHECKSUMS, ChunkWriter, Staging, UploadInfo, file_hash, parse_checksum
from argus.service import Principal

__all__ = ["TusController", "Uploads", "running", "sweeper"]

log = logging.getLogger(__name__)
VERSION = "1.0.0"
EXTENSIONS = "creation,checksum,expiration,termination"
BUFFER = 4 << 20  # bytes of a chunk held in memory before they are written
MAX_METADATA = 4096
PREFIX = "/api/v2/uploads"
# Declared for the OpenAPI document; checked by _check_version (412 for another version).
TusResumable = Annotated[str, Parameter(header="Tus-Resumable", description="1.0.0",
                                        schema_extra={"pattern": r"^1\.0\.0$"})]
UploadLength = Annotated[str, Parameter(header="Upload-Length", description="the file's size in bytes",
                                        schema_extra={"pattern": r"^[0-9]{1,18}$"})]
UploadOffset = Annotated[str, Parameter(header="Upload-Offset", description="where this chunk starts",
                                        schema_extra={"pattern": r"^[0-9]{1,18}$"})]


class Uploads:
    """The server's side of uploads in progress: the staging folders, one lock per upload
    (one PATCH at a time), and each upload's running sha256 (so the last chunk need not
    read the whole file again; rebuilt from disk after a restart)."""

    def __init__(self, staging: Staging) -> None:
        self.staging = staging
        self.locks: dict[str, asyncio.Lock] = {}
        self.hashes: dict[str, tuple[int, Any]] = {}

    def lock(self, upload_id: str) -> asyncio.Lock:
        return self.locks.setdefault(upload_id, asyncio.Lock())

    def forget(self, upload_id: str) -> None:
        self.locks.pop(upload_id, None)
        self.hashes.pop(upload_id, None)

    async def hash_at(self, info: UploadInfo) -> Any:
        have = self.hashes.get(info.id)
        if have is not None and have[0] == info.offset:
            return have[1]
        return await asyncio.to_thread(file_hash, self.staging.data_path(info), info.offset)


def _tus(**extra: str) -> dict[str, str]:
    return {"Tus-Resumable": VERSION, "Cache-Control": "no-store", **extra}


def _error(status: int, detail: str, **headers: str) -> HTTPException:
    return HTTPException(status_code=status, detail=detail, headers=_tus(**headers))


def _expires(info: UploadInfo) -> str:
    return formatdate(info.expires, usegmt=True)


def _check_version(request: Request[Any, Any, Any]) -> None:
    sent = request.headers.get("tus-resumable")
    if sent != VERSION:
        raise _error(412, f"send Tus-Resumable: {VERSION} (got {sent or 'none'}); this server "
                     f"speaks tus {VERSION}", **{"Tus-Version": VERSION})


def _metadata(raw: str) -> dict[str, str]:
    """``Upload-Metadata``: ``key base64,key base64,key``; 400 for what is not."""
    if len(raw) > MAX_METADATA:
        raise _error(400, f"Upload-Metadata is over {MAX_METADATA} characters")
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        key, _, value = pair.partition(" ")
        try:
            out[key] = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError) as exc:
            raise _error(400, f"Upload-Metadata {key!r}: the value must be base64 of UTF-8 "
                         "text") from exc
    return out


def _length(request: Request[Any, Any, Any]) -> int:
    raw = request.headers.get("upload-length")
    if raw is None or not raw.isdigit():
        raise _error(400, "send Upload-Length: the file's size in bytes (this server needs "
                     "it up front to check your limit; Upload-Defer-Length is not supported)")
    return int(raw)


def _hex64(value: str | None, where: str) -> str | None:
    """A SHA-256 as 64 hex digits (lower-cased); 400 naming ``where`` for anything else."""
    if value is None:
        return None
    value = value.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise _error(400, f"{where} must be the file's SHA-256 as 64 hex digits")
    return value


def _sha256(meta: dict[str, str]) -> str | None:
    return _hex64(meta.get("sha256"), "Upload-Metadata sha256")


def _location(info: UploadInfo) -> str:
    return f"{PREFIX}/{info.id}"


async def _load(state: State, who: Principal, upload_id: str) -> UploadInfo:
    info = await asyncio.to_thread(state.uploads.staging.load, who.user_id, upload_id)
    if info is None:
        raise _error(404, f"no upload {upload_id!r} of yours (finished, canceled or expired: "
                     "start it again with POST /api/v2/uploads)")
    return info


def _chunk_headers(request: Request[Any, Any, Any]) -> tuple[str, tuple[str, bytes] | None, str | None]:
    """A PATCH's headers, checked: its ``Upload-Offset`` (digits), its ``Upload-Checksum``
    (algorithm, digest) if any, and the whole file's ``Argus-File-Sha256`` if sent."""
    _check_version(request)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/offset+octet-stream":
        raise _error(415, "a PATCH body is Content-Type: application/offset+octet-stream")
    sent = request.headers.get("upload-offset", "")
    if not sent.isdigit():
        raise _error(400, "send Upload-Offset: where this chunk starts (HEAD tells)")
    checksum = None
    if request.headers.get("upload-checksum"):
        try:
            checksum = parse_checksum(request.headers["upload-checksum"])
        except ValueError as exc:
            raise _error(400, str(exc)) from exc
    return sent, checksum, _hex64(request.headers.get("argus-file-sha256"), "Argus-File-Sha256")


async def _stream_chunk(request: Request[Any, Any, Any], writer: ChunkWriter, room: int) -> None:
    """The request body into ``writer``, at most ``room`` bytes (413 beyond). The pieces the
    HTTP server hands over are gathered, uncopied, into batches of ``BUFFER`` bytes; one
    batch is written (and hashed) in a thread while the next is received, so at most two
    are held. (Joining them into one buffer cost a copy of every byte: as much CPU as the
    write itself.)"""
    batch: list[bytes] = []
    held = received = 0
    pending: asyncio.Future[None] | None = None
    try:
        async for piece in request.stream():
            received += len(piece)
            if received > room:
                raise _error(413, f"the chunk goes past Upload-Length (or the "
                             f"{quota.human(room)} one PATCH may carry); send at most the "
                             "bytes left")
            batch.append(piece)
            held += len(piece)
            if held >= BUFFER:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(asyncio.to_thread(writer.write, batch))
                batch, held = [], 0
        if pending is not None:
            await pending
            pending = None
        if batch:
            await asyncio.to_thread(writer.write, batch)
    finally:
        if pending is not None:  # let the write end before the caller cuts the file back
            with contextlib.suppress(BaseException):
                await pending


async def _complete(state: State, who: Principal, info: UploadInfo, whole: Any,
                    at_end: str | None = None) -> None:
    """The last byte arrived: check the sha256 (declared at creation and/or on the last
    PATCH, ``at_end``), then put the file in place."""
    uploads: Uploads = state.uploads
    for declared in (info.sha256, at_end):
        if declared is not None and whole.hexdigest() != declared:
            await asyncio.to_thread(uploads.staging.discard, who.user_id, info.id)
            uploads.forget(info.id)
            raise _error(460, f"{info.dest}: the file's SHA-256 is {whole.hexdigest()}, not "
                         f"the {declared} declared; nothing was published and the upload is "
                         "dropped: check the local file and upload it again")
    area, parts = files.dest_of(Path(state.config.shared_root), who.user_id, info.dest)
    path = uploads.staging.data_path(info)
    try:
        await asyncio.to_thread(files.publish, area, parts, path.parent, path.name)
    except safefs.Refused as exc:  # kept: the last PATCH (empty) may be sent again
        raise _error(exc.status, exc.detail, **{"Upload-Offset": str(info.offset)}) from exc
    await asyncio.to_thread(uploads.staging.discard, who.user_id, info.id)
    uploads.forget(info.id)
    state.usage.forget(who.user_id)


class TusController(Controller):
    path = "/uploads"
    tags = ["uploads"]

    @route("/", http_method=[HttpMethod.OPTIONS], status_code=204, include_in_schema=False)
    async def capabilities(self) -> Response[None]:
        """What this tus server supports."""
        return Response(None, status_code=204, headers={
            "Tus-Resumable": VERSION, "Tus-Version": VERSION, "Tus-Extension": EXTENSIONS,
            "Tus-Checksum-Algorithm": ",".join(CHECKSUMS)})

    @post("/", status_code=201, responses=errors(400, 403, 404, 409, 412, 413))
    async def create(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     tus_resumable: TusResumable, upload_length: UploadLength) -> Response[None]:
        """Create an upload (tus creation): ``Upload-Length`` and ``Upload-Metadata``
        with ``path`` (area/path) and optionally ``sha256``. Refused here, before any
        byte is sent, when it cannot be written or does not fit."""
        _check_version(request)
        length = _length(request)
        raw_meta = request.headers.get("upload-metadata", "")
        meta = _metadata(raw_meta)
        dest = meta.get("path", "")
        if not dest:
            raise _error(400, "Upload-Metadata needs path: where the file goes, e.g. "
                         "datasets/toy/train.jsonl (base64-encoded)")
        sha = _sha256(meta)
        area, parts = files.dest_of(Path(state.config.shared_root), who.user_id, dest)
        try:
            await asyncio.to_thread(files.check_dest, area, parts)
        except safefs.Refused as exc:
            raise _error(exc.status, exc.detail) from exc
        cfg = state.config.v2.files
        usage = await files.user_usage(state, who.user_id, fresh=True)
        refusal = quota.no_room(dest, length, usage)
        if refusal:
            raise _error(413, refusal)
        staging: Staging = state.uploads.staging
        if len(await asyncio.to_thread(staging.of_user, who.user_id)) >= cfg.max_staged_uploads:
            raise _error(409, f"you have {cfg.max_staged_uploads} unfinished uploads; finish or "
                         "cancel one (DELETE its upload URL) first")
        info = await asyncio.to_thread(staging.create, who.user_id, dest, length, sha, raw_meta,
                                       cfg.upload_expiry_s)
        if length == 0:  # nothing to send: complete now
            await _complete(state, who, info, hashlib.sha256())
        return Response(None, status_code=201, headers=_tus(
            Location=_location(info), **{"Upload-Offset": "0", "Upload-Expires": _expires(info)}))

    @head("/{upload_id:str}", status_code=200, responses=errors(404, 412))
    async def offset(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     upload_id: str, tus_resumable: TusResumable) -> Response[None]:
        """How much of the upload the server has (``Upload-Offset``)."""
        _check_version(request)
        info = await _load(state, who, upload_id)
        return Response(None, status_code=200, headers=_tus(**{
            "Upload-Offset": str(info.offset), "Upload-Length": str(info.length),
            "Upload-Expires": _expires(info), "Upload-Metadata": info.metadata}))

    @patch("/{upload_id:str}", status_code=204, request_max_body_size=None,
           responses=errors(400, 404, 409, 412, 413, 415, 460))
    async def append(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     upload_id: str, tus_resumable: TusResumable,
                     upload_offset: UploadOffset) -> Response[None]:
        """Append one chunk at ``Upload-Offset`` (``application/offset+octet-stream``;
        ``Upload-Checksum: <sha1|sha256|md5> <base64>`` checked, 460 if it differs; on the
        last chunk, ``Argus-File-Sha256: <64 hex>`` checked against the whole file)."""
        sent, checksum, at_end = _chunk_headers(request)
        uploads: Uploads = state.uploads
        await _load(state, who, upload_id)  # a lock only for an upload that exists
        lock = uploads.lock(upload_id)
        if lock.locked():
            raise _error(409, "another request is writing this upload; wait for it (or for "
                         "it to time out), then HEAD and go on from its Upload-Offset")
        async with lock:
            info = await _load(state, who, upload_id)
            if int(sent) != info.offset:
                raise _error(409, f"Upload-Offset {sent} is not where the upload stands "
                             f"({info.offset}); go on from there",
                             **{"Upload-Offset": str(info.offset)})
            room = min(info.length - info.offset, state.config.v2.files.max_chunk_bytes)
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > room:
                raise _error(413, f"this chunk ({quota.human(int(declared))}) goes past "
                             f"Upload-Length or the {quota.human(state.config.v2.files.max_chunk_bytes)}"
                             " one PATCH may carry; send at most "
                             f"{min(room, info.length - info.offset)} bytes")
            whole = await uploads.hash_at(info)
            writer = await asyncio.to_thread(ChunkWriter, uploads.staging.data_path(info),
                                             info.offset, whole,
                                             checksum[0] if checksum else None)
            try:
                await _stream_chunk(request, writer, room)
                if checksum is not None and not writer.matches(checksum[1]):
                    raise _error(460, f"the chunk at {info.offset} does not match its "
                                 f"Upload-Checksum ({checksum[0]}); it was dropped: send it "
                                 "again", **{"Upload-Offset": str(info.offset)})
                if at_end is not None and info.offset + writer.written != info.length:
                    raise _error(400, "send Argus-File-Sha256 only with the chunk that ends "
                                 "the file; this chunk was dropped",
                                 **{"Upload-Offset": str(info.offset)})
                await asyncio.to_thread(writer.finish)
            except BaseException:
                await asyncio.to_thread(writer.abort)  # the chunk is not kept (cut off, bad)
                raise
            info.offset += writer.written
            info.expires = time.time() + state.config.v2.files.upload_expiry_s
            await asyncio.to_thread(uploads.staging.save, info)
            uploads.hashes[info.id] = (info.offset, writer.whole)
            if info.offset == info.length:
                await _complete(state, who, info, writer.whole, at_end)
        return Response(None, status_code=204, headers=_tus(**{
            "Upload-Offset": str(info.offset), "Upload-Expires": _expires(info)}))

    @delete("/{upload_id:str}", status_code=204, responses=errors(404, 412))
    async def terminate(self, request: Request[Any, Any, Any], state: State, who: Principal,
                        upload_id: str, tus_resumable: TusResumable) -> Response[None]:
        """Drop an unfinished upload (tus termination): its bytes are freed at once."""
        _check_version(request)
        info = await _load(state, who, upload_id)
        async with state.uploads.lock(upload_id):
            await asyncio.to_thread(state.uploads.staging.discard, who.user_id, info.id)
        state.uploads.forget(upload_id)
        return Response(None, status_code=204, headers=_tus())


async def sweeper(state: State) -> None:
    """Remove expired uploads every ``v2.files.sweep_interval_s`` seconds."""
    interval = state.config.v2.files.sweep_interval_s
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        with contextlib.suppress(OSError):
            for info in await asyncio.to_thread(state.uploads.staging.sweep):
                state.uploads.forget(info.id)
                log.info("upload %s of %s to %s expired; removed (%d of %d bytes had come)",
                         info.id, info.user, info.dest, info.offset, info.length)


@contextlib.asynccontextmanager
async def running(state: State) -> AsyncIterator[None]:
    """Set up the upload state on ``state`` and run the sweeper while the app runs."""
    shared = Path(state.config.shared_root)
    state.uploads = Uploads(Staging(shared / ".uploads"))
    state.staging = state.uploads.staging
    state.usage = quota.UsageCache(shared)
    task = asyncio.get_running_loop().create_task(sweeper(state))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
