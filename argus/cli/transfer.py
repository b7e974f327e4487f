"""The client side of transfers: resumable uploads over tus (docs/api.md "Resumable
uploads") and downloads that go on with HTTP ``Range``, one file or a tree.

Each file is sent in chunks of ``CHUNK`` bytes (one in memory at a time), each with its
SHA-1 as ``Upload-Checksum``; the whole file's SHA-256 is computed while the chunks are
sent (no pass of its own) and declared on the last chunk (``Argus-File-Sha256``), which the
server checks before it publishes the file; a file that changed while it was sent is not
finished. A lost connection is retried from the
offset the server reports (``HEAD``); if the command gives up or is stopped, a small state
file (``$XDG_CACHE_HOME/argus/transfers.json``), keyed by server, destination, local path,
size and mtime, lets the same command, run again, go on where it stopped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, cast
from urllib.parse import quote

import click
import httpx

from argus.cli.client import EXIT_CONNECT, EXIT_REFUSED, Client

__all__ = ["CHUNK", "RETRIES", "Progress", "Running", "StateFile", "download_file", "local_tree", "remote_tree", "upload_file"]

CHUNK = 32 << 20
TUS = {"Tus-Resumable": "1.0.0"}
RETRIES = 5


def _state_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "argus" / "transfers.json"


class StateFile:
    """Uploads in progress and downloads' validators, by key; written whole each change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or _state_path()
        try:
            data = json.loads(self.path.read_text())
            self.items: dict[str, dict[str, Any]] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.items = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.items.get(key)

    def set(self, key: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.items.pop(key, None)
        else:
            self.items[key] = value
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(self.items))
            os.replace(tmp, self.path)
        except OSError:
            pass  # no state kept: a re-run starts that file over, nothing worse


def _prefix(f: Any, upto: int) -> "hashlib._Hash":
    """sha256 of the file's first ``upto`` bytes (a resumed upload's part already sent)."""
    h, at = hashlib.sha256(), 0
    while at < upto and (data := os.pread(f.fileno(), min(CHUNK, upto - at), at)):
        h.update(data)
        at += len(data)
    return h


def _pieces(data: bytes) -> Iterator[bytes]:
    """A chunk as 1 MiB views: the HTTP client then never copies what is left of the
    whole chunk after each partial socket send."""
    view = memoryview(data)
    for i in range(0, len(view), 1 << 20):
        yield cast(bytes, view[i:i + (1 << 20)])  # httpx/h11 take any buffer


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _api(client: Client, path: str) -> str:
    return client.url + "/api/v2" + path


def _offset(client: Client, location: str) -> int | None:
    """What the server has of the upload at ``location``; None when it is gone."""
    r = client.http.head(location, headers=TUS)
    if r.status_code == 404:
        return None
    client.check(r)
    return int(r.headers["upload-offset"])


def _create(client: Client, dest: str, size: int) -> str:
    meta = f"path {_b64(dest)}"
    r = client.http.post(_api(client, "/uploads"), headers={
        **TUS, "Upload-Length": str(size), "Upload-Metadata": meta})
    client.check(r)  # a file that does not fit is refused here, before any byte is sent
    location = r.headers["location"]
    return location if location.startswith("http") else client.url + location


def _chunk(f: Any, offset: int) -> tuple[int, bytes, str]:
    data = os.pread(f.fileno(), CHUNK, offset)  # no shared file position: thread-safe
    return offset, data, base64.b64encode(hashlib.sha1(data).digest()).decode()


class Running:
    """The whole file's sha256 over its first ``at`` bytes, as far as the server kept
    them; kept across retries so a resumed upload need not read the file again."""

    def __init__(self) -> None:
        self.at, self.h = 0, hashlib.sha256()

    def rebase(self, f: Any, offset: int) -> None:
        if self.at != offset:
            self.at, self.h = offset, _prefix(f, offset)

    def advance(self, data: bytes, at: int) -> None:
        self.h.update(data)
        self.at = at


def _send(client: Client, location: str, f: Any, offset: int, size: int,
          progress: Progress, stamp: tuple[int, int] | None = None,
          whole: Running | None = None) -> int:
    """Chunks from ``offset`` to the end; returns where the server stands. The next chunk
    is read and hashed in a thread while one is sent (two in memory at most); the whole
    file's sha256 (``whole``) goes on, in that thread, with each chunk the server kept and
    is declared on the last. ``stamp`` (size, mtime_ns): the last chunk is not sent if
    the file changed."""
    damaged, whole = 0, whole or Running()
    with ThreadPoolExecutor(1) as pool:  # one thread: its tasks run in order
        pool.submit(whole.rebase, f, offset)
        ahead = pool.submit(_chunk, f, offset)
        while offset < size:
            at, data, digest = ahead.result()
            if at != offset:  # the server stands elsewhere than read ahead
                at, data, digest = _chunk(f, offset)
                pool.submit(whole.rebase, f, offset)
            headers = {**TUS, "Upload-Offset": str(offset), "Upload-Checksum": f"sha1 {digest}",
                       "Content-Type": "application/offset+octet-stream",
                       "Content-Length": str(len(data))}
            if offset + len(data) < size:
                ahead = pool.submit(_chunk, f, offset + len(data))
            else:
                _unchanged(client, f, stamp, location)
                final = pool.submit(lambda: whole.h.copy()).result()
                final.update(data)
                headers["Argus-File-Sha256"] = final.hexdigest()
            r = client.http.patch(location, content=_pieces(data), headers=headers,
                                  timeout=httpx.Timeout(30.0, write=300.0, read=300.0))
            if r.status_code == 460 and "chunk" in r.text and damaged < 3:  # damaged on the way
                damaged += 1
                ahead = pool.submit(_chunk, f, offset)
                continue
            client.check(r)
            new = int(r.headers["upload-offset"])
            progress(new - offset)
            if new == offset + len(data):  # kept: the running hash takes it
                pool.submit(whole.advance, data, new)
            offset = new
    return offset


def _unchanged(client: Client, f: Any, stamp: tuple[int, int] | None, location: str) -> None:
    """Refuse to finish an upload whose local file changed while it was sent."""
    st = os.fstat(f.fileno())
    if stamp is not None and (st.st_size, st.st_mtime_ns) != stamp:
        client.http.delete(location, headers=TUS)
        client.fail(f"{f.name} changed while it was being sent; nothing was published: run "
                    "the command again once it is complete", EXIT_REFUSED)


def upload_file(client: Client, source: Path, dest: str, state: StateFile,
                progress: Progress, retries: int = RETRIES) -> int:
    """Send ``source`` to ``dest`` (area/path), going on from where an earlier run or a
    lost connection stopped. Returns the size."""
    st = source.stat()
    key = f"up|{client.url}|{dest}|{source.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    entry = state.get(key) or {}
    tries, whole = 0, Running()
    with open(source, "rb") as f:
        while True:
            try:
                offset = _offset(client, entry["url"]) if entry.get("url") else None
                if offset is None:
                    entry = {"url": _create(client, dest, st.st_size)}
                    state.set(key, entry)
                    offset = 0
                progress(offset)
                _send(client, entry["url"], f, offset, st.st_size, progress,
                      (st.st_size, st.st_mtime_ns), whole)
                state.set(key, None)
                return st.st_size
            except httpx.TransportError as exc:
                tries = _dropped(client, exc, tries, retries, progress)


class Progress:
    """One file's part of a transfer's bar: ``__call__(n)`` adds n bytes; ``reset``
    takes this file's bytes back off (a retry starts from what the server says)."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.file_done = bar, 0

    def __call__(self, n: int) -> None:
        self.file_done += n
        self.bar.update(n)

    def reset(self) -> None:
        self(-self.file_done)


def remote_tree(client: Client, folder: str) -> Iterator[tuple[str, int]]:
    """(path relative to ``folder``, size) of every file under the remote ``folder``;
    links and other entries are skipped with a note."""
    pending = [""]
    while pending:
        rel = pending.pop()
        path = f"{folder.rstrip('/')}/{rel}".rstrip("/")
        d = client.request("GET", "/files/" + quote(path, safe="/")).json()
        if not isinstance(d, dict) or "entries" not in d:
            client.fail(f"{folder} is not a folder", EXIT_REFUSED)
        if d.get("truncated"):
            click.echo(f"note: {path} holds more than one listing shows; only the first "
                       f"{len(d['entries'])} entries are copied", err=True)
        for e in d["entries"]:
            sub = f"{rel}/{e['name']}".lstrip("/")
            if e.get("type") == "dir":
                pending.append(sub)
            elif e.get("type") == "file":
                yield sub, int(e["size"])
            else:
                click.echo(f"note: {folder}/{sub} is a {e.get('type')}; skipped", err=True)


def download_file(client: Client, remote: str, target: Path, state: StateFile,
                  progress: Progress, retries: int = RETRIES) -> None:
    """``remote`` (area/path) to ``target``, through ``.<name>.part`` beside it: a stopped
    download goes on with ``Range`` (``If-Range``: only if the file did not change)."""
    part = target.with_name(f".{target.name}.part")
    key = f"down|{client.url}|{remote}|{target.resolve()}"
    tries = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        etag = (state.get(key) or {}).get("etag")
        headers = {"Range": f"bytes={have}-", "If-Range": etag} if have and etag else {}
        try:
            with client.http.stream("GET", _api(client, "/files/" + quote(remote, safe="/")),
                                    headers=headers,
                                    timeout=httpx.Timeout(30.0, read=300.0)) as r:
                if r.status_code == 416:  # the part is already whole
                    break
                if r.status_code >= 400:
                    r.read()
                    client.check(r)
                state.set(key, {"etag": r.headers.get("etag")})
                mode = "ab" if r.status_code == 206 else "wb"
                progress(have if mode == "ab" else 0)
                with open(part, mode) as f:
                    for chunk in r.iter_raw():  # the server sends no content-encoding
                        f.write(chunk)
                        progress(len(chunk))
            break
        except httpx.TransportError as exc:
            tries = _dropped(client, exc, tries, retries, progress)
    os.replace(part, target)
    state.set(key, None)


def local_tree(source: Path) -> Iterator[tuple[PurePosixPath, Path, int]]:
    """(relative path, path, size) of each regular file under ``source``; links are not
    followed (noted and skipped)."""
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode):
                click.echo(f"note: {p} is not a regular file; skipped", err=True)
                continue
            yield PurePosixPath(p.relative_to(source).as_posix()), p, st.st_size


def _dropped(client: Any, exc: Exception, tries: int, retries: int, progress: Any) -> int:
    """A lost connection: give up past ``retries`` (saying how to go on), else wait a
    growing while; the progress is shown again from what the server reports."""
    tries += 1
    if tries > retries:
        client.fail(f"lost the connection to {client.url} ({exc}); run the same "
                    "command again to go on where it stopped", EXIT_CONNECT)
    time.sleep(min(10.0, 0.5 * 2 ** tries))
    progress.reset()
    return tries
