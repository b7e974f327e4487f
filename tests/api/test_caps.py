"""Caps that hold under concurrency (issue 54, part 4): a user's queue cap checked inside
the transaction that appends (16 submitters at once through a real server never get more
than the cap acked), the default cap for users an admin set none for, and the caps on
event and log streams open at once per token and per user."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from argus.api.app import create_app
from projections.tasks_read import waiting_count
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, Env, _seed, make_config, put_dataset, serve

SUBMITTERS = 16
EACH = 3


@contextlib.asynccontextmanager
async def live_server(tmp_path: Path, **api: object) -> AsyncIterator[Env]:
    config = make_config(tmp_path, submit_burst=0, **api)
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    async with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            tokens = await _seed(client)
            yield Env(client=client, app=app, config=config, tokens=tokens)


async def storm(env: Env, who: str) -> list[httpx.Response]:
    """``SUBMITTERS`` clients, each on its own connection, submitting ``EACH`` tasks at once."""
    base = str(env.client.base_url)

    async def one_client() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            return [await c.post("/api/v2/tasks", headers=env.h(who), content=ADVANCED) for _ in range(EACH)]

    rounds = await asyncio.gather(*[one_client() for _ in range(SUBMITTERS)])
    return [r for answers in rounds for r in answers]


async def test_the_queue_cap_holds_against_16_concurrent_submitters(tmp_path: Path) -> None:
    async with live_server(tmp_path) as env:
        put_dataset(env.shared, "alice")
        r = await env.client.post("/api/v2/users/alice/limits", headers=env.h("admin"), json={"max_queued": 20})
        assert r.status_code == 200, r.text
        answers = await storm(env, "alice")
        codes = [a.status_code for a in answers]
        assert set(codes) <= {201, 409}, [a.text for a in answers if a.status_code not in (201, 409)]
        assert codes.count(201) == 20, f"{codes.count(201)} acked with a cap of 20"
        refused = [a.json()["detail"] for a in answers if a.status_code == 409]
        assert all("your cap is 20" in d for d in refused), refused[:3]
        waiting = await env.store.read_snapshot(lambda db: waiting_count(db, "alice"))
        submitted = await env.store.read_snapshot(lambda db: db.execute(
            "SELECT count(*) FROM events WHERE type = 'TaskSubmitted'").fetchone()[0])
        assert waiting == submitted == 20


async def test_a_default_cap_for_users_without_one(tmp_path: Path) -> None:
    async with live_server(tmp_path, default_max_queued=4) as env:
        put_dataset(env.shared, "bob")
        answers = await storm(env, "bob")
        assert [a.status_code for a in answers].count(201) == 4
        refused = next(a.json()["detail"] for a in answers if a.status_code == 409)
        assert "your cap is 4 (the default, v2.api.default_max_queued)" in refused, refused
        # An admin's cap of their own replaces the default; admins are not capped.
        r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("admin"), json={"max_queued": 6})
        assert r.status_code == 200
        codes = [(await env.client.post("/api/v2/tasks", headers=env.h("bob"), content=ADVANCED)).status_code
                 for _ in range(3)]
        assert codes == [201, 201, 409]
        put_dataset(env.shared, "admin")
        for _ in range(5):
            r = await env.client.post("/api/v2/tasks", headers=env.h("admin"), content=ADVANCED)
            assert r.status_code == 201, r.text


async def open_stream(client: httpx.AsyncClient, token: str, stack: contextlib.AsyncExitStack,
                      path: str = "/api/v2/events") -> httpx.Response:
    return await stack.enter_async_context(
        client.stream("GET", path, headers={"Authorization": f"Bearer {token}"}))


async def test_streams_are_capped_per_token_and_per_user(tmp_path: Path) -> None:
    async with live_server(tmp_path, max_streams_per_token=2, max_streams_per_user=3) as env:
        r = await env.client.post("/api/v2/users/alice/tokens", headers=env.h("admin"), json={"label": "2nd"})
        second = r.json()["token"]
        first = env.tokens["alice"]
        async with contextlib.AsyncExitStack() as stack:
            a1 = await open_stream(env.client, first, stack)
            a2 = await open_stream(env.client, first, stack)
            assert (a1.status_code, a2.status_code) == (200, 200)
            async with env.client.stream("GET", "/api/v2/events", headers=env.h("alice")) as a3:
                assert a3.status_code == 429
                detail = (await a3.aread()).decode()
                assert "max_streams_per_token" in detail and "2 streams are open with this token" in detail
                assert a3.headers.get("retry-after")
            b1 = await open_stream(env.client, second, stack)
            assert b1.status_code == 200  # another token of the same user: the user's third
            async with env.client.stream("GET", "/api/v2/events",
                                         headers={"Authorization": f"Bearer {second}"}) as b2:
                assert b2.status_code == 429
                assert "max_streams_per_user" in (await b2.aread()).decode()
            # Other users are not held back.
            bob = await open_stream(env.client, env.tokens["bob"], stack)
            assert bob.status_code == 200
        # Closed streams give their places back (once the server sees them go).
        deadline = time.monotonic() + 30
        while True:
            async with env.client.stream("GET", "/api/v2/events", headers=env.h("alice")) as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "closed streams never gave their places back"
            await asyncio.sleep(0.2)
        assert env.app.state.stream_slots.open.get("user:alice", 0) <= 1


async def test_log_streams_count_too(tmp_path: Path) -> None:
    async with live_server(tmp_path, max_streams_per_token=1, max_streams_per_user=0) as env:
        put_dataset(env.shared, "alice")
        r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED)
        task = r.json()["task_id"]
        async with contextlib.AsyncExitStack() as stack:
            events = await open_stream(env.client, env.tokens["alice"], stack)
            assert events.status_code == 200
            async with env.client.stream("GET", f"/api/v2/tasks/{task}/logs?follow=true",
                                         headers=env.h("alice")) as logs:
                assert logs.status_code == 429, logs.status_code
