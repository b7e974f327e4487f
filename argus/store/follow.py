"""Following the log: catch up, then every new event as it is appended, in one loop.

Each backend says how it learns of an append (``signal``): SQLite's store by an event its
own appends set (another process's appends by polling), PostgreSQL's log by the database's
notification of every append, from any host.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable, Iterable

from argus.events import Recorded

__all__ = ["follow_log"]


async def follow_log(
    read: Callable[..., Awaitable[list[Recorded]]],
    signal: Callable[[], asyncio.Event],
    *,
    after: int,
    types: Iterable[str] | None,
    batch: int,
    poll_interval: float,
) -> AsyncIterator[Recorded]:
    """Every event after ``after`` (``read(cursor, batch, types=...)``, as the stores'),
    then every new one. ``signal()`` is taken before each read and, when nothing was new,
    waited on for up to ``poll_interval``: an append between the read and the wait is not
    missed."""
    type_list = list(types) if types is not None else None
    cursor = after
    while True:
        woken = signal()
        records = await read(cursor, batch, types=type_list)
        if records:
            for rec in records:
                yield rec
            cursor = records[-1].position
            continue
        try:
            await asyncio.wait_for(woken.wait(), poll_interval)
        except asyncio.TimeoutError:
            pass
