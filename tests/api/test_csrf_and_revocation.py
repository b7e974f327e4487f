"""Cookie sessions refuse cross-site requests (Origin check); bearer tokens are not
affected; a revoked token's or a disabled user's open streams end within a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.api.test_sse import sse_events

FOREIGN = "http://evil.example:9000"


def _own_origin(client: Any) -> str:
    url = httpx.URL(str(client.base_url))
    return f"{url.scheme}://{url.netloc.decode()}"


async def _login(env: Env, who: str) -> None:
    r = await env.client.post("/api/v2/auth/login", json={"token": env.tokens[who]},
                              headers={"Origin": _own_origin(env.client)})
    assert r.status_code == 200, r.text


async def _head(env: Env) -> int:
    return await env.store.head_position()


async def test_a_cookie_request_from_another_site_is_refused_and_writes_nothing(env: Env) -> None:
    put_dataset(env.shared, "alice")
    await _login(env, "alice")
    before = await _head(env)
    for headers in ({"Origin": FOREIGN}, {"Origin": "null"}, {}, {"Referer": FOREIGN + "/page"}):
        r = await env.client.post("/api/v2/tasks", content=ADVANCED,
                                  headers={"Content-Type": "text/plain", **headers})
        assert r.status_code == 403, (headers, r.text)
        assert "cross-site" in r.json()["detail"]
    assert await _head(env) == before  # nothing was written
    # From the site's own pages (Origin, or only a Referer of this site) it goes through.
    r = await env.client.post("/api/v2/tasks", content=ADVANCED,
                              headers={"Content-Type": "text/plain", "Origin": _own_origin(env.client)})
    assert r.status_code == 201, r.text
    r = await env.client.get("/api/v2/tasks")  # reads need no Origin
    assert r.status_code == 200 and r.json()["total"] == 1


async def test_bearer_tokens_are_not_affected(env: Env) -> None:
    put_dataset(env.shared, "bob")
    r = await env.client.post("/api/v2/tasks", content=ADVANCED,
                              headers={**env.h("bob"), "Origin": FOREIGN})
    assert r.status_code == 201, r.text


async def test_login_from_another_site_is_refused(env: Env) -> None:
    r = await env.client.post("/api/v2/auth/login", json={"token": env.tokens["alice"]},
                              headers={"Origin": FOREIGN})
    assert r.status_code == 403
    assert "set-cookie" not in r.headers


async def test_the_session_cookie_is_secure_over_tls(env: Env) -> None:
    r = await env.client.post("/api/v2/auth/login", json={"token": env.tokens["alice"]},
                              headers={"X-Forwarded-Proto": "https"})
    assert r.status_code == 200
    assert "secure" in r.headers["set-cookie"].lower()
    r = await env.client.post("/api/v2/auth/login", json={"token": env.tokens["alice"]})
    assert "secure" not in r.headers["set-cookie"].lower()


async def _stream_until_closed(live: Env, who: str, opened: asyncio.Event) -> float:
    """Hold ``who``'s event stream open; return when the server ends it (the time then)."""
    async with live.client.stream("GET", "/api/v2/events", headers=live.h(who)) as resp:
        assert resp.status_code == 200
        opened.set()
        async for _ in sse_events(resp):
            pass
    return time.monotonic()


async def _token_id(live: Env, who: str) -> str:
    r = await live.client.get(f"/api/v2/users/{who}/tokens", headers=live.h("admin"))
    return r.json()[0]["token_id"]  # type: ignore[no-any-return]


async def test_revoking_a_token_ends_its_open_streams(live: Env) -> None:
    opened = asyncio.Event()
    stream = asyncio.create_task(_stream_until_closed(live, "alice", opened))
    await asyncio.wait_for(opened.wait(), 5)
    bob_opened = asyncio.Event()
    bob = asyncio.create_task(_stream_until_closed(live, "bob", bob_opened))
    await asyncio.wait_for(bob_opened.wait(), 5)
    token_id = await _token_id(live, "alice")
    revoked_at = time.monotonic()
    r = await live.client.delete(f"/api/v2/users/alice/tokens/{token_id}", headers=live.h("admin"))
    assert r.status_code == 200
    ended_at = await asyncio.wait_for(stream, 5)
    print(f"stream ended {ended_at - revoked_at:.3f} s after the revocation")
    assert ended_at - revoked_at < 1.0
    assert not bob.done()  # someone else's stream goes on
    bob.cancel()
    r = await live.client.get("/api/v2/events", headers=live.h("alice"))
    assert r.status_code == 401  # the reconnect is refused


async def test_disabling_a_user_ends_their_streams_and_log_follows(live: Env) -> None:
    put_dataset(live.shared, "alice")
    r = await live.client.post("/api/v2/tasks", content=ADVANCED, headers=live.h("alice"))
    task_id = r.json()["task_id"]
    opened = asyncio.Event()
    stream = asyncio.create_task(_stream_until_closed(live, "alice", opened))
    await asyncio.wait_for(opened.wait(), 5)

    async def follow() -> float:
        url = f"/api/v2/tasks/{task_id}/logs?follow=true"
        async with live.client.stream("GET", url, headers=live.h("alice")) as resp:
            assert resp.status_code == 200
            async for _ in sse_events(resp):
                pass
        return time.monotonic()

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.7)  # the follow loop is running
    disabled_at = time.monotonic()
    r = await live.client.post("/api/v2/users/alice/disable", headers=live.h("admin"))
    assert r.status_code == 200
    for ended in await asyncio.wait_for(asyncio.gather(stream, follower), 5):
        assert ended - disabled_at < 1.5  # the follow loop looks every 0.5 s
    r = await live.client.get("/api/v2/events", headers=live.h("alice"))
    assert r.status_code == 403
