"""AuthCache: a lookup that was reading while a user event came in must not cache what
it read (it may predate the event: a disabled user or revoked token would then pass)."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, Callable

from argus.service import AuthCache, hash_token


class _SlowStore:
    """Answers the token lookup from a real users table as it is *when asked*, after a pause."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE users (user_id, display_name, is_admin, disabled, created_at, max_priority, "
                        "may_pin, max_queued, max_gpus)")
        self.db.execute("CREATE TABLE tokens (token_id, user_id, token_hash, label, revoked, issued_at, last_used_at)")
        self.db.execute("INSERT INTO users VALUES ('alice', '', 0, 0, 0, 0, 0, 0, 0)")
        self.db.execute("INSERT INTO tokens VALUES ('tok-1', 'alice', ?, '', 0, 0, NULL)", (hash_token("t"),))
        self.queries = 0
        self.gate = asyncio.Event()

    def disable(self) -> None:
        self.db.execute("UPDATE users SET disabled = 1")

    async def read_snapshot(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        self.queries += 1
        found = fn(self.db)
        await self.gate.wait()
        return found


async def test_lookup_racing_an_invalidation_is_not_cached() -> None:
    store = _SlowStore()
    cache = AuthCache(store)  # type: ignore[arg-type]
    pending = asyncio.create_task(cache.lookup("t"))
    await asyncio.sleep(0)  # the lookup has read the old row and waits
    store.disable()  # alice disabled ...
    cache.invalidate()  # ... and the event seen
    store.gate.set()
    assert (await pending).disabled is False  # that request began before the event
    who = await cache.lookup("t")
    assert who is not None and who.disabled is True
    assert store.queries == 2


async def test_lookup_is_cached_without_events() -> None:
    store = _SlowStore()
    store.gate.set()
    cache = AuthCache(store)  # type: ignore[arg-type]
    first = await cache.lookup("t")
    assert first is not None and await cache.lookup("t") == first
    assert store.queries == 1
    assert hash_token("t") != "t"
