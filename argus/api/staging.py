"""Uploads in progress (the tus protocol's server side keeps them here): one folder per
user under ``<shared>/.uploads/``, outside every user's home, so neither the user's jobs
(confined jobs see only their home and ``common/``) nor the files API can reach them.

Each upload is ``<id>.data`` (the bytes received and checked so far) and ``<id>.info``
(an :class:`UploadInfo`, written whole). ``offset`` in the info is the truth: bytes past
it (a chunk cut off, a crash mid-write) are cut off before the next chunk is written. A
chunk's bytes are streamed to disk through a bounded buffer while they are hashed, and
count only once the whole chunk arrived and its checksum matched.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from argus import safefs

__all__ = ["CHECKSUMS", "ChunkWriter", "Staging", "UploadInfo", "file_hash", "parse_checksum"]

# tus checksum extension: the algorithms a chunk's Upload-Checksum may name.
CHECKSUMS = ("sha1", "sha256", "md5")
_ID = re.compile(r"^[0-9a-f]{32}$")
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UploadInfo(msgspec.Struct, kw_only=True):
    """One upload in progress: where it goes, how long it is, what it should hash to."""

    id: str
    user: str
    dest: str  # area/path, as the files API names it (checked again when published)
    length: int
    offset: int = 0
    sha256: str | None = None  # hex, declared by the client in Upload-Metadata
    metadata: str = ""  # Upload-Metadata as sent, echoed back on HEAD
    created: float = 0.0
    expires: float = 0.0


class Staging:
    """The staging root ``<shared>/.uploads``; every method blocks (run it in a thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, user: str) -> Path:
        d = self.root / user
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        return d

    def create(self, user: str, dest: str, length: int, sha256: str | None, metadata: str,
               expiry_s: float) -> UploadInfo:
        now = time.time()
        info = UploadInfo(id=secrets.token_hex(16), user=user, dest=dest, length=length,
                          sha256=sha256, metadata=metadata, created=now, expires=now + expiry_s)
        d = self._dir(user)
        os.close(os.open(d / f"{info.id}.data", _NEW, 0o600))
        self.save(info)
        return info

    def save(self, info: UploadInfo) -> None:
        safefs.write_atomic(self._dir(info.user) / f"{info.id}.info", msgspec.json.encode(info))

    def load(self, user: str, upload_id: str) -> UploadInfo | None:
        """The user's upload ``upload_id``; None when missing, another user's, or expired."""
        if not _ID.match(upload_id):
            return None
        raw = safefs.read_bounded(self.root / user / f"{upload_id}.info", 64 << 10)
        if raw is None:
            return None
        try:
            info = msgspec.json.decode(raw, type=UploadInfo)
        except msgspec.DecodeError:
            return None
        if info.user != user or info.id != upload_id or info.expires < time.time():
            return None
        return info

    def data_path(self, info: UploadInfo) -> Path:
        return self.root / info.user / f"{info.id}.data"

    def of_user(self, user: str) -> list[UploadInfo]:
        """The user's uploads in progress (unexpired), oldest first."""
        d = self.root / user
        if not d.is_dir():
            return []
        found = [self.load(user, p.name[:-5]) for p in d.iterdir() if p.name.endswith(".info")]
        return sorted((i for i in found if i is not None), key=lambda i: i.created)

    def discard(self, user: str, upload_id: str) -> None:
        for suffix in (".data", ".info"):
            (self.root / user / f"{upload_id}{suffix}").unlink(missing_ok=True)

    def sweep(self, now: float | None = None) -> list[UploadInfo]:
        """Remove every expired upload (and stray data files without an info); returns
        the uploads removed."""
        now = time.time() if now is None else now
        removed: list[UploadInfo] = []
        if not self.root.is_dir():
            return removed
        for d in self.root.iterdir():
            if not d.is_dir() or d.is_symlink():
                continue
            for p in list(d.iterdir()):
                if p.name.endswith(".info"):
                    raw = safefs.read_bounded(p, 64 << 10)
                    try:
                        info = msgspec.json.decode(raw or b"", type=UploadInfo)
                    except msgspec.DecodeError:
                        info = None
                    if info is None or info.expires < now:
                        self.discard(d.name, p.name[:-5])
                        if info is not None:
                            removed.append(info)
                elif p.name.endswith(".data") and not (d / f"{p.name[:-5]}.info").exists():
                    p.unlink(missing_ok=True)
        return removed


# Threads that compute chunks' own checksums beside the writes (one per PATCH at a time).
_HASHERS = ThreadPoolExecutor(4, thread_name_prefix="argus-chunk-hash")
_IOV_MAX = 1024  # Linux's UIO_MAXIOV: the most buffers one writev takes
_FADVISE = hasattr(os, "posix_fadvise")  # not on macOS: there the fdatasync does it all


def _update(h: "hashlib._Hash", pieces: list[bytes]) -> None:
    for piece in pieces:
        h.update(piece)


def _write_all(fd: int, pieces: list[bytes]) -> None:
    """Every byte of ``pieces`` to ``fd`` at its position, in as few ``writev`` as the
    kernel allows (a short write goes on from where it stopped)."""
    views = [memoryview(p) for p in pieces if len(p)]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        while done:
            if done >= len(views[0]):
                done -= len(views.pop(0))
            else:
                views[0], done = views[0][done:], 0


def file_hash(path: Path, upto: int) -> "hashlib._Hash":
    """sha256 of the first ``upto`` bytes of ``path``, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = upto
        while left > 0:
            data = f.read(min(1 << 20, left))
            if not data:
                break
            h.update(data)
            left -= len(data)
    return h


class ChunkWriter:
    """One PATCH: bytes appended at ``info.offset``, hashed as they go (the chunk's own
    checksum, and a copy of the whole file's sha256 so far). Nothing counts until
    :meth:`finish`; :meth:`abort` cuts the file back."""

    def __init__(self, path: Path, offset: int, whole: "hashlib._Hash",
                 algorithm: str | None) -> None:
        self.offset, self.written = offset, 0
        self.fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        os.ftruncate(self.fd, offset)  # whatever a cut-off chunk or a crash left past it
        os.lseek(self.fd, offset, os.SEEK_SET)
        self.whole = whole.copy()
        self.chunk = hashlib.new(algorithm) if algorithm else None

    def write(self, pieces: list[bytes]) -> None:
        """Append ``pieces`` in order (written with ``writev``, never joined). The chunk's
        own checksum is computed in another thread meanwhile: hashlib lets go of the GIL,
        so it runs beside this thread's write and running SHA-256."""
        side = _HASHERS.submit(_update, self.chunk, pieces) if self.chunk is not None else None
        size = sum(map(len, pieces))
        try:
            _write_all(self.fd, pieces)
            # Start writing these pages back now, without waiting (what fadvise DONTNEED
            # does to dirty pages): the fdatasync that ends the chunk then has little
            # left to wait for (32 MiB: 27 -> 6-9 ms here), so the client stalls less.
            if _FADVISE:
                os.posix_fadvise(self.fd, self.offset + self.written, size, os.POSIX_FADV_DONTNEED)
            _update(self.whole, pieces)
        finally:
            if side is not None:
                side.result()
        self.written += size

    def matches(self, expected: bytes) -> bool:
        return self.chunk is None or secrets.compare_digest(self.chunk.digest(), expected)

    def finish(self) -> None:
        """The chunk is kept: on disk before the offset that claims it is saved."""
        os.fdatasync(self.fd)
        self.close()

    def abort(self) -> None:
        try:
            os.ftruncate(self.fd, self.offset)
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def parse_checksum(header: str) -> tuple[str, bytes]:
    """``Upload-Checksum: <algorithm> <base64 digest>`` → (algorithm, digest); ValueError
    saying what is wrong."""
    algorithm, _, encoded = header.strip().partition(" ")
    if algorithm not in CHECKSUMS:
        raise ValueError(f"checksum algorithm {algorithm!r} is not supported; use one of "
                         f"{', '.join(CHECKSUMS)}")
    try:
        digest = base64.b64decode(encoded.strip(), validate=True)
    except ValueError as exc:
        raise ValueError("Upload-Checksum must be '<algorithm> <base64 digest>'") from exc
    if len(digest) != hashlib.new(algorithm).digest_size:
        raise ValueError(f"a {algorithm} digest is {hashlib.new(algorithm).digest_size} bytes")
    return algorithm, digest
