"""Work gathered from concurrent callers and done together: group commit, task directories.

With ``synchronous=FULL`` every commit waits for an fsync; under load most of an append's
time is that wait. Callers hand their batch to :class:`GroupCommitter`; one worker takes
everything queued at that moment, whoever sent it, and appends it with one
``append_batches`` call. Each batch carries its own caller's ``EventMeta``, so every event
keeps the actor and request id of the request that caused it. If that transaction fails
(say one batch hits a ConcurrencyConflict), each batch is retried alone so that one bad
request cannot fail the others, and each caller gets its own outcome.

:class:`Gatherer` is the loop under it: whatever work other callers queued while the
worker was busy is done in one go (one thread hop, one transaction, one walk of a
directory tree) instead of one each.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Awaitable, Callable, Generic, TypeVar

import msgspec

from argus.events import EventMeta

if TYPE_CHECKING:
    from argus.store import AppendBatch, EventStore

__all__ = ["Gatherer", "GroupCommitter"]

T = TypeVar("T")
R = TypeVar("R")


class Gatherer(Generic[T, R]):
    """Items handed in by concurrent callers, handled a gathering at a time:
    ``handle(items)`` returns one outcome per item, a value or the exception that item's
    caller gets. Up to ``max_items`` in one gathering."""

    def __init__(self, handle: Callable[[list[T]], Awaitable[list[R | BaseException]]],
                 max_items: int = 256) -> None:
        self._handle = handle
        self._max = max_items
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def put(self, item: T) -> R:
        """Queue ``item`` and wait for its outcome."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        fut: asyncio.Future[R] = loop.create_future()
        await self._queue.put((item, fut))
        return await fut

    @property
    def pending(self) -> int:
        """Items queued for the next gathering."""
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
            taken = [first]
            while len(taken) < self._max and not self._queue.empty():
                taken.append(self._queue.get_nowait())
            try:
                outcomes = await self._handle([item for item, _ in taken])
            except Exception as exc:  # the handler's own failure is every caller's
                outcomes = [exc] * len(taken)
            for (_, fut), outcome in zip(taken, outcomes):
                _settle(fut, outcome)


class GroupCommitter:
    """Append batches for many concurrent callers in few transactions."""

    def __init__(
        self, store: "EventStore", *, max_batches: int = 256,
        observe: Callable[[float, int], None] | None = None,
    ) -> None:
        self._store = store
        self._gatherer: Gatherer[AppendBatch, list[int]] = Gatherer(self._commit, max_batches)
        self._observe = observe
        self.transactions = 0

    async def append(self, batch: "AppendBatch", meta: EventMeta) -> list[int]:
        """Queue ``batch`` (caused by ``meta``) and wait until it is durable; returns its
        positions. Raises what the store raised for this batch alone."""
        if batch.meta != meta:
            # The meta travels with the batch: the transaction holds other callers' batches.
            batch = msgspec.structs.replace(batch, meta=meta)
        return await self._gatherer.put(batch)

    @property
    def pending(self) -> int:
        """Batches queued for the next transaction."""
        return self._gatherer.pending

    async def close(self) -> None:
        await self._gatherer.close()

    async def _commit(self, group: list["AppendBatch"]) -> list[list[int] | BaseException]:
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches(group)
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            # All or nothing: nothing was written. Find out whose batch failed by
            # appending each alone; the others still succeed.
            return [await self._one(batch) for batch in group]
        self._done(started, len(group))
        outcomes: list[list[int] | BaseException] = []
        i = 0
        for batch in group:
            n = len(batch.events)
            outcomes.append(positions[i:i + n])
            i += n
        return outcomes

    async def _one(self, batch: "AppendBatch") -> list[int] | BaseException:
        started = time.perf_counter()
        try:
            positions = await self._store.append_batches([batch])
        except Exception as exc:  # handed to the caller, who maps it to a response
            return exc
        self._done(started, 1)
        return positions

    def _done(self, started: float, batches: int) -> None:
        self.transactions += 1
        if self._observe is not None:
            self._observe(time.perf_counter() - started, batches)


def _settle(fut: "asyncio.Future[R]", outcome: R | BaseException) -> None:
    # A caller that gave up (its request was cancelled) has a done future: leave it.
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
