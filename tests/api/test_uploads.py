"""Resumable uploads (tus 1.0.0 at /api/v2/uploads), ranges, limits and housekeeping:
a file appears under its name only complete and checked; a bad chunk or a wrong
sha256 publishes nothing; what cannot fit is refused before a byte is sent."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
import time
from typing import Any
from urllib.parse import urlparse

from tests.api.conftest import Env

TUS = {"Tus-Resumable": "1.0.0"}


def _meta(**kv: str) -> str:
    return ",".join(f"{k} {base64.b64encode(v.encode()).decode()}" for k, v in kv.items())


async def _create(env: Env, who: str, path: str, body: bytes, sha: str | None = None) -> Any:
    meta = {"path": path, "sha256": sha or hashlib.sha256(body).hexdigest()}
    return await env.client.post("/api/v2/uploads", headers={
        **env.h(who), **TUS, "Upload-Length": str(len(body)), "Upload-Metadata": _meta(**meta)})


async def _patch(env: Env, who: str, loc: str, offset: int, data: bytes,
                 digest: bytes | None = None) -> Any:
    check = base64.b64encode(digest or hashlib.sha1(data).digest()).decode()
    return await env.client.patch(loc, content=data, headers={
        **env.h(who), **TUS, "Upload-Offset": str(offset), "Upload-Checksum": f"sha1 {check}",
        "Content-Type": "application/offset+octet-stream"})


def _staged(env: Env) -> list[str]:
    d = env.shared / ".uploads" / "alice"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


async def test_upload_in_chunks_resumes_from_the_servers_offset(env: Env) -> None:
    r = await env.client.options("/api/v2/uploads")
    assert "checksum" in r.headers["tus-extension"] and r.headers["tus-version"] == "1.0.0"
    body = bytes(range(256)) * 4000
    r = await _create(env, "alice", "datasets/big/blob.bin", body)
    assert r.status_code == 201, r.text
    loc = r.headers["location"]
    assert "upload-expires" in r.headers
    r = await _patch(env, "alice", loc, 0, body[:300_000])
    assert r.status_code == 204 and r.headers["upload-offset"] == "300000"
    assert not (env.shared / "users/alice/datasets/big/blob.bin").exists()  # not yet
    r = await env.client.head(loc, headers={**env.h("alice"), **TUS})
    assert r.headers["upload-offset"] == "300000" and r.headers["upload-length"] == str(len(body))
    r = await env.client.head(loc, headers={**env.h("bob"), **TUS})  # not bob's
    assert r.status_code == 404
    r = await _patch(env, "alice", loc, 0, body[:10])  # not where it stands
    assert r.status_code == 409 and r.headers["upload-offset"] == "300000"
    r = await _patch(env, "alice", loc, 300_000, body[300_000:])
    assert r.status_code == 204, r.text
    assert (env.shared / "users/alice/datasets/big/blob.bin").read_bytes() == body
    assert _staged(env) == []
    r = await env.client.head(loc, headers={**env.h("alice"), **TUS})
    assert r.status_code == 404


async def test_a_corrupted_chunk_or_a_wrong_sha256_publishes_nothing(env: Env) -> None:
    body = b"a" * 100_000 + b"b" * 100_000
    loc = (await _create(env, "alice", "datasets/x.bin", body)).headers["location"]
    first = loc.rsplit("/", 1)[1]
    r = await _patch(env, "alice", loc, 0, body[:100_000], digest=hashlib.sha1(b"other").digest())
    assert r.status_code == 460 and "Upload-Checksum" in r.json()["detail"]
    r = await env.client.head(loc, headers={**env.h("alice"), **TUS})
    assert r.headers["upload-offset"] == "0"  # the bad chunk was dropped
    assert (env.shared / ".uploads/alice" / f"{loc.rsplit('/', 1)[1]}.data").stat().st_size == 0
    # Declared sha256 that is not the bytes': refused at the end, upload gone.
    loc = (await _create(env, "alice", "datasets/y.bin", body, sha="0" * 64)).headers["location"]
    assert (await _patch(env, "alice", loc, 0, body[:100_000])).status_code == 204
    r = await _patch(env, "alice", loc, 100_000, body[100_000:])
    assert r.status_code == 460 and "nothing was published" in r.json()["detail"]
    assert not (env.shared / "users/alice/datasets/y.bin").exists()
    assert (await env.client.head(loc, headers={**env.h("alice"), **TUS})).status_code == 404
    assert _staged(env) == [f"{first}.data", f"{first}.info"]  # only the first one's


async def test_the_whole_files_sha256_declared_on_the_last_chunk(env: Env) -> None:
    """``Argus-File-Sha256`` on the last PATCH (the client hashes while it sends): only
    there, 64 hex digits; a wrong one publishes nothing and drops the upload."""
    body = b"c" * 150_000
    good = hashlib.sha256(body).hexdigest()

    async def last(loc: str, offset: int, data: bytes, sha: str) -> Any:
        check = base64.b64encode(hashlib.sha1(data).digest()).decode()
        return await env.client.patch(loc, content=data, headers={
            **env.h("alice"), **TUS, "Upload-Offset": str(offset), "Argus-File-Sha256": sha,
            "Upload-Checksum": f"sha1 {check}", "Content-Type": "application/offset+octet-stream"})

    meta = _meta(path="datasets/end.bin")
    create = {**env.h("alice"), **TUS, "Upload-Length": str(len(body)), "Upload-Metadata": meta}
    loc = (await env.client.post("/api/v2/uploads", headers=create)).headers["location"]
    r = await last(loc, 0, body[:50_000], good)  # not the chunk that ends the file
    assert r.status_code == 400 and "only with the chunk that ends" in r.json()["detail"]
    assert r.headers["upload-offset"] == "0"
    assert (await last(loc, 0, body[:50_000], "xyz")).status_code == 400  # not 64 hex
    assert (await _patch(env, "alice", loc, 0, body[:50_000])).status_code == 204
    r = await last(loc, 50_000, body[50_000:], "f" * 64)
    assert r.status_code == 460 and "nothing was published" in r.json()["detail"]
    assert not (env.shared / "users/alice/datasets/end.bin").exists() and _staged(env) == []
    loc = (await env.client.post("/api/v2/uploads", headers=create)).headers["location"]
    assert (await _patch(env, "alice", loc, 0, body[:50_000])).status_code == 204
    r = await last(loc, 50_000, body[50_000:], good.upper())
    assert r.status_code == 204, r.text
    assert (env.shared / "users/alice/datasets/end.bin").read_bytes() == body


async def test_refused_at_creation_in_human_units(env: Env) -> None:
    env.config.v2.files.quota_bytes = 2 * 1024**3
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), **TUS, "Upload-Length": str(int(4.8 * 1024**3)),
        "Upload-Metadata": _meta(path="models/shard.safetensors")})
    assert r.status_code == 413
    assert "4.8 GiB is larger than your 2 GiB limit" in r.json()["detail"], r.text
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), **TUS, "Upload-Length": "10", "Upload-Metadata": _meta(path="jobs/x")})
    assert r.status_code == 403
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), "Upload-Length": "10", "Upload-Metadata": _meta(path="datasets/x")})
    assert r.status_code == 400 and "tus-resumable" in r.text.lower()
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), "Tus-Resumable": "0.2.2", "Upload-Length": "10",
        "Upload-Metadata": _meta(path="datasets/x")})
    assert r.status_code == 412 and r.headers["tus-version"] == "1.0.0"
    (env.shared / "users/alice/datasets").mkdir(parents=True, exist_ok=True)
    (env.shared / "users/alice/datasets/link").symlink_to(env.shared / "users/bob")
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), **TUS, "Upload-Length": "10",
        "Upload-Metadata": _meta(path="datasets/link/x")})
    assert r.status_code == 400 and "symbolic link" in r.json()["detail"]
    assert _staged(env) == []
    # Usage counts what is held and what unfinished uploads reserve.
    (env.shared / "users/alice/datasets/held.bin").write_bytes(b"x" * 1000)
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), **TUS, "Upload-Length": str(1024**3),
        "Upload-Metadata": _meta(path="datasets/half.bin")})
    assert r.status_code == 201
    d = (await env.client.get("/api/v2/files", headers=env.h("alice"))).json()
    assert d["used_bytes"] == 1000 and d["staged_bytes"] == 1024**3
    assert d["limit_bytes"] == 2 * 1024**3 and "of 2 GiB used" in d["summary"]
    r = await env.client.post("/api/v2/uploads", headers={
        **env.h("alice"), **TUS, "Upload-Length": str(1024**3 + 10),
        "Upload-Metadata": _meta(path="datasets/other.bin")})
    assert r.status_code == 413 and "does not fit" in r.json()["detail"]
    r = await env.client.put("/api/v2/files/datasets/p.bin", content=b"x" * 2000,
                             headers=env.h("alice"))
    assert r.status_code == 201  # the old PUT still takes small files
    loc = (await env.client.get("/api/v2/files", headers=env.h("alice"))).json()
    assert loc["used_bytes"] == 3000
    env.app.state.staging.sweep(now=10**12)  # long after it expired
    assert _staged(env) == []


async def test_termination_frees_the_reservation(env: Env) -> None:
    loc = (await _create(env, "alice", "code/r.py", b"x" * 10)).headers["location"]
    r = await env.client.delete(loc, headers={**env.h("bob"), **TUS})
    assert r.status_code == 404
    r = await env.client.delete(loc, headers={**env.h("alice"), **TUS})
    assert r.status_code == 204 and _staged(env) == []


async def test_range_downloads(env: Env) -> None:
    body = bytes(range(256)) * 10
    await env.client.put("/api/v2/files/datasets/r.bin", content=body, headers=env.h("alice"))
    url = "/api/v2/files/datasets/r.bin"
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == body[100:200]
    assert r.headers["content-range"] == f"bytes 100-199/{len(body)}"
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=2500-"})
    assert r.status_code == 206 and r.content == body[2500:]
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=-10"})
    assert r.content == body[-10:]
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=9999-"})
    assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(body)}"
    etag = r = (await env.client.get(url, headers=env.h("alice"))).headers["etag"]
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=5-", "If-Range": '"x"'})
    assert r.status_code == 200 and r.content == body  # changed: the whole file
    r = await env.client.get(url, headers={**env.h("alice"), "Range": "bytes=5-", "If-Range": etag})
    assert r.status_code == 206 and r.content == body[5:]


async def test_mkdir_move_and_delete_a_folder(env: Env) -> None:
    h = env.h("alice")
    r = await env.client.post("/api/v2/files/datasets/a/b", json={"op": "mkdir"}, headers=h)
    assert r.status_code == 201 and r.json()["type"] == "dir"
    await env.client.put("/api/v2/files/datasets/a/b/f.txt", content=b"hi", headers=h)
    r = await env.client.post("/api/v2/files/datasets/a", json={"op": "move", "to": "models/m"},
                              headers=h)
    assert r.status_code == 201, r.text
    assert (env.shared / "users/alice/models/m/b/f.txt").read_bytes() == b"hi"
    r = await env.client.post("/api/v2/files/models/m", json={"op": "move", "to": "models/m/b/x"},
                              headers=h)
    assert r.status_code == 400 and "into itself" in r.json()["detail"]
    r = await env.client.post("/api/v2/files/models/m", json={"op": "move", "to": "jobs/m"},
                              headers=h)
    assert r.status_code == 403
    await env.client.put("/api/v2/files/code/c.txt", content=b"c", headers=h)
    r = await env.client.post("/api/v2/files/code/c.txt", json={"op": "move", "to": "models/m"},
                              headers=h)
    assert r.status_code == 409  # never over something that exists
    r = await env.client.delete("/api/v2/files/models/m", headers=h)
    assert r.status_code == 400 and "argus files rm -r" in r.json()["detail"]
    r = await env.client.delete("/api/v2/files/models/m?recursive=true", headers=h)
    assert r.status_code == 200 and not (env.shared / "users/alice/models/m").exists()


def _raw(url: str, request: bytes, body: bytes = b"", read: bool = True) -> bytes:
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(request + body)
        if not read:
            return b""
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            piece = s.recv(65536)
            if not piece:
                break
            answer += piece
        return answer


async def test_refused_before_the_body_with_expect_continue(live: Env) -> None:
    token = live.tokens["alice"]
    url = str(live.client.base_url)
    req = (f"PUT /api/v2/files/datasets/huge.bin HTTP/1.1\r\nHost: x\r\n"
           f"Authorization: Bearer {token}\r\nContent-Length: {5 * 1024**3}\r\n"
           "Content-Type: application/octet-stream\r\nExpect: 100-continue\r\n\r\n").encode()
    answer = await asyncio.to_thread(_raw, url, req)  # no body sent at all
    head = answer.split(b"\r\n", 1)[0]
    assert b"413" in head and b"100 Continue" not in answer, answer[:300]
    assert b"5 GiB is larger than the 2 GiB one PUT takes" in answer


async def test_a_chunk_cut_off_midway_is_not_counted(live: Env) -> None:
    body = b"z" * 1_000_000
    r = await live.client.post("/api/v2/uploads", headers={
        **live.h("alice"), **TUS, "Upload-Length": str(len(body)),
        "Upload-Metadata": _meta(path="datasets/cut.bin",
                                 sha256=hashlib.sha256(body).hexdigest())})
    loc = r.headers["location"]
    check = base64.b64encode(hashlib.sha1(body).digest()).decode()
    req = (f"PATCH {loc} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {live.tokens['alice']}\r\n"
           f"Tus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nUpload-Checksum: sha1 {check}\r\n"
           f"Content-Type: application/offset+octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
           ).encode()
    await asyncio.to_thread(_raw, str(live.client.base_url), req, body[:400_000], False)
    # As a client does: while the server still holds the cut request (409), wait; then go on
    # from the offset it reports, which must be 0 (the half chunk dropped, not counted).
    deadline = time.monotonic() + 120
    while True:
        r = await live.client.head(loc, headers={**live.h("alice"), **TUS})
        assert r.headers["upload-offset"] == "0"
        r = await live.client.patch(loc, content=body, headers={
            **live.h("alice"), **TUS, "Upload-Offset": "0", "Upload-Checksum": f"sha1 {check}",
            "Content-Type": "application/offset+octet-stream"})
        if r.status_code != 409 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert r.status_code == 204, r.text
    assert (live.shared / "users/alice/datasets/cut.bin").read_bytes() == body


async def test_expired_uploads_are_swept_in_the_background(tmp_path: Any) -> None:
    from litestar.testing import AsyncTestClient

    from argus.api.app import create_app
    from tests.api.conftest import ADMIN_TOKEN, make_config

    config = make_config(tmp_path)
    config.v2.files.upload_expiry_s = 1
    config.v2.files.sweep_interval_s = 0.2
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", **TUS}
    async with AsyncTestClient(app=app) as client:
        r = await client.post("/api/v2/uploads", headers={
            **admin, "Upload-Length": "100", "Upload-Metadata": _meta(path="datasets/late.bin")})
        assert r.status_code == 201
        staged = tmp_path / "shared/.uploads/admin"
        assert len(list(staged.iterdir())) == 2
        for _ in range(300):  # expires after 1 s, swept within 0.2 s after that
            if not list(staged.iterdir()):
                break
            await asyncio.sleep(0.05)
        assert not list(staged.iterdir())
        r = await client.head(r.headers["location"], headers=admin)
        assert r.status_code == 404


def test_chunk_writer_keeps_every_piece_in_order(tmp_path: Any) -> None:
    """A batch of more pieces than one writev takes (1024), empty ones among them, lands
    whole and in order; the chunk's checksum (computed in another thread) and the running
    SHA-256 see the same bytes; abort cuts the file back to where the chunk began."""
    from argus.api.staging import ChunkWriter

    path = tmp_path / "u.data"
    path.write_bytes(b"head")
    pieces = [bytes([i % 251]) * (i % 7) for i in range(2500)]
    body = b"".join(pieces)
    writer = ChunkWriter(path, 4, hashlib.sha256(b"head"), "sha1")
    writer.write(pieces[:1300])
    writer.write(pieces[1300:])
    assert writer.written == len(body)
    assert writer.matches(hashlib.sha1(body).digest())
    assert writer.whole.hexdigest() == hashlib.sha256(b"head" + body).hexdigest()
    writer.finish()
    assert path.read_bytes() == b"head" + body
    again = ChunkWriter(path, 4 + len(body), writer.whole, None)
    again.write([b"more"])
    again.abort()
    assert path.read_bytes() == b"head" + body
