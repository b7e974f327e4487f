"""Group commit: gather concurrent appends into one transaction (one fsync).

With ``synchronous=FULL`` every commit waits for an fsync; under load most of an append's
time is that wait. Callers hand their batch to :class:`GroupCommitter`; one worker takes
everything queued at that moment, whoever sent it, and appends it with one
``append_batches`` call. Each batch carries its own caller's ``EventMeta``, so every event
keeps the actor and request id of the request that caused it. If that transaction fails
(say one batch hits a ConcurrencyConflict), each batch is retried alone so that one bad
request cannot fail the others, and each caller gets its own outcome.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

import msgspec

from argus.events import EventMeta

if TYPE_CHECKING:
    from argus.store import AppendBatch, EventStore

__all__ = ["GroupCommitter"]

_Item = tuple["AppendBatch", "asyncio.Future[list[int]]"]


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
        """Queue ``batch`` (caused by ``meta``) and wait until it is durable; returns its
        positions. Raises what the store raised for this batch alone."""
        if batch.meta != meta:
            # The meta travels with the batch: the transaction holds other callers' batches.
            batch = msgspec.structs.replace(batch, meta=meta)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        fut: asyncio.Future[list[int]] = loop.create_future()
        await self._queue.put((batch, fut))
        return await fut

    @property
    def pending(self) -> int:
        """Batches queued for the next transaction."""
        return self._queue.qsize()

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
            await self._commit(items)

    async def _commit(self, group: list[_Item]) -> None:
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches([batch for batch, _ in group])
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0][1], exc)
            else:
                # All or nothing: nothing was written. Find out whose batch failed by
                # appending each alone; the others still succeed.
                for item in group:
                    await self._one(item)
            return
        self._done(started, len(group))
        i = 0
        for batch, fut in group:
            n = len(batch.events)
            _settle(fut, positions[i:i + n])
            i += n

    async def _one(self, item: _Item) -> None:
        batch, fut = item
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches([batch])
        except Exception as exc:  # handed to the caller, who maps it to a response
            _settle(fut, exc)
            return
        self._done(started, 1)
        _settle(fut, positions)

    def _done(self, started: float, batches: int) -> None:
        self.transactions += 1
        if self._observe is not None:
            self._observe(time.perf_counter() - started, batches)


def _settle(fut: "asyncio.Future[list[int]]", outcome: list[int] | BaseException) -> None:
    # A caller that gave up (its request was cancelled) has a done future: leave it.
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
