"""AuthCache: a lookup that was reading while a user event came in must not cache what
it read (it may predate the event: a disabled user or revoked token would then pass)."""

from __future__ import annotations

import asyncio
from typing import Any

from argus.service import AuthCache, hash_token


class _SlowStore:
    """Answers the token lookup with the row it holds *when asked*, after a pause."""

    def __init__(self) -> None:
        self.row: tuple[Any, ...] = ("alice", 0, 0, "", "tok-1", None)
        self.queries = 0
        self.gate = asyncio.Event()

    async def query(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.queries += 1
        row = self.row
        await self.gate.wait()
        return [row]


async def test_lookup_racing_an_invalidation_is_not_cached() -> None:
    store = _SlowStore()
    cache = AuthCache(store)  # type: ignore[arg-type]
    pending = asyncio.create_task(cache.lookup("t"))
    await asyncio.sleep(0)  # the lookup has read the old row and waits
    store.row = ("alice", 0, 1, "", "tok-1", None)  # alice disabled ...
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
