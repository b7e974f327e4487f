"""Work gathered from concurrent callers and done together.

:class:`Gatherer` is the loop under group commit (``argus.store.group``) and the task
directories (``argus.service.taskdir``): whatever work other callers queued while the
worker was busy is done in one go (one thread hop, one transaction, one walk of a
directory tree) instead of one each.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, TypeVar

__all__ = ["Gatherer", "stop_task"]

T = TypeVar("T")
R = TypeVar("R")


async def stop_task(task: "asyncio.Task[None] | None") -> None:
    """Cancel a background task and wait until it has stopped (whatever it raised)."""
    if task is not None:
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


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
        await stop_task(self._task)

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


def _settle(fut: "asyncio.Future[R]", outcome: R | BaseException) -> None:
    # A caller that gave up (its request was cancelled) has a done future: leave it.
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
