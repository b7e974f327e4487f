"""Group commit: gather concurrent appends into one transaction (one fsync).

With ``synchronous=FULL`` every commit waits for an fsync; under load most of an append's
time is that wait. Callers hand their batch to :class:`GroupCommitter`; one worker takes
everything queued at that moment (same actor, so one ``EventMeta`` fits all) and appends
it with one ``append_batches`` call. If that transaction fails (say one batch hits a
ConcurrencyConflict), each batch is retried alone so that one bad request cannot fail
the others, and each caller gets its own outcome.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from argus.events import EventMeta

if TYPE_CHECKING:
    from argus.store import AppendBatch, EventStore

__all__ = ["GroupCommitter"]

_Item = tuple["AppendBatch", EventMeta, "asyncio.Future[list[int]]"]


class GroupCommitter:
    """Append batches for many concurrent callers in few transactions."""

    def __init__(
        self, store: "EventStore", *, max_batches: int = 256,
        observe: Callable[[float, int], None] | None = None,
    ) -> None:
        self._store = store
        self._max = max_batches
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._observe = observe
        self.transactions = 0

    async def append(self, batch: "AppendBatch", meta: EventMeta) -> list[int]:
        """Queue ``batch`` and wait until it is durable; returns its positions."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        await self._queue.put((batch, meta, fut))
        return await fut

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            items = [first]
            while len(items) < self._max and not self._queue.empty():
                items.append(self._queue.get_nowait())
            by_meta: dict[EventMeta, list[_Item]] = {}
            for item in items:
                by_meta.setdefault(item[1], []).append(item)
            for meta, group in by_meta.items():
                await self._commit(meta, group)

    async def _commit(self, meta: EventMeta, group: list[_Item]) -> None:
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches([g[0] for g in group], meta=meta)
        except Exception:
            if len(group) == 1:
                await self._one(group[0])
            else:
                for item in group:
                    await self._one(item)
            return
        self.transactions += 1
        if self._observe is not None:
            self._observe(time.perf_counter() - started, len(group))
        i = 0
        for batch, _meta, fut in group:
            n = len(batch.events)
            if not fut.done():
                fut.set_result(positions[i:i + n])
            i += n

    async def _one(self, item: _Item) -> None:
        batch, meta, fut = item
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches([batch], meta=meta)
        except Exception as exc:  # handed to the caller, who maps it to a response
            if not fut.done():
                fut.set_exception(exc)
            return
        self.transactions += 1
        if self._observe is not None:
            self._observe(time.perf_counter() - started, 1)
        if not fut.done():
            fut.set_result(positions)
