"""Tokens record when they were last used, coarsely: one TokenUsed per token per
resolution, not a write per request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from argus.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, Env, _seed, make_config


@pytest.fixture
async def used(tmp_path: Path) -> AsyncIterator[Env]:
    from litestar.testing import AsyncTestClient

    config = make_config(tmp_path)
    config.v2.auth.token_use_resolution_s = 3600
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    async with AsyncTestClient(app=app) as client:
        yield Env(client=client, app=app, config=config, tokens=await _seed(client))


async def _uses(env: Env) -> list[str]:
    await asyncio.sleep(0.1)  # the note is appended in the background
    return [r.event.token_id for r in await env.store.read(0, 1000) if r.type == "TokenUsed"]


async def test_first_use_is_recorded_then_not_again_within_the_resolution(used: Env) -> None:
    before = await _uses(used)
    for _ in range(20):
        assert (await used.client.get("/api/v2/tasks", headers=used.h("alice"))).status_code == 200
    after = await _uses(used)
    alice_tokens = [t for t in after if t not in before]
    assert len(alice_tokens) == 1, after  # twenty requests, one record
    r = await used.client.get("/api/v2/users/alice/tokens", headers=used.h("alice"))
    [token] = r.json()
    assert token["last_used_at"] is not None


async def test_a_use_after_the_resolution_is_recorded_again(used: Env) -> None:
    await used.client.get("/api/v2/tasks", headers=used.h("bob"))
    first = await _uses(used)
    commands = used.app.state.commands
    who = await used.app.state.auth.lookup(used.tokens["bob"])
    commands.note_token_use(who, now=who.token_last_used_at + 3601 if who.token_last_used_at else 10**10)
    assert len(await _uses(used)) == len(first) + 1
