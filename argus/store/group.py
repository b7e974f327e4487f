"""Group commit, as an event log: ``GroupCommitLog`` wraps another ``EventLog`` and
appends what concurrent callers hand it in as few transactions as it can.

With ``synchronous=FULL`` every commit waits for an fsync; under load most of an append's
time is that wait. Each caller's append is queued; one worker takes everything queued at
that moment, whoever sent it, and records it with one ``record_batches`` call of the log
beneath. Each batch carries its own caller's ``EventMeta``, so every event keeps the actor
and request id of the request that caused it. If that transaction fails (say one caller's
batch hits a ConcurrencyConflict), each caller's batches are retried alone, so one bad
request cannot fail the others and each caller gets its own outcome. One caller's batches
stay one unit: they commit together or not at all, as ``append_batches`` promises.

Everything else (reads, subscriptions, leases) is the wrapped log's, unchanged, so the
contract tests hold this log to the same interface as the one it wraps.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Callable

import msgspec

from argus.events import EventBase, EventMeta, Recorded
from argus.store.append import AppendBatch
from argus.store.gather import Gatherer
from argus.store.protocol import EventLog

__all__ = ["GroupCommitLog"]

# What a caller hands in: its batches, each stamped with its meta.
Unit = list[AppendBatch]


class GroupCommitLog:
    """``log`` with its appends gathered across concurrent callers (up to ``max_batches``
    callers a transaction). ``observe(seconds, callers)`` is told of each transaction."""

    def __init__(self, log: EventLog, *, max_batches: int = 256,
                 observe: Callable[[float, int], None] | None = None) -> None:
        self.log = log
        self._gatherer: Gatherer[Unit, list[Recorded]] = Gatherer(self._commit, max_batches)
        self._observe = observe
        self.transactions = 0

    # ------------------------------------------------------------------ appends, gathered
    async def append(self, stream: str, expected_version: int | None, events: Sequence[EventBase], *,
                     owner: str | None = None, meta: EventMeta | None = None) -> list[int]:
        batch = AppendBatch(stream=stream, expected_version=expected_version, events=list(events), owner=owner)
        return await self.append_batches([batch], meta=meta)

    async def append_batches(self, batches: Sequence[AppendBatch], *,
                             meta: EventMeta | None = None) -> list[int]:
        return [r.position for r in await self.record_batches(batches, meta=meta)]

    async def record_batches(self, batches: Sequence[AppendBatch], *,
                             meta: EventMeta | None = None) -> list[Recorded]:
        # The meta travels with each batch: the transaction holds other callers' batches.
        stamped = [b if meta is None or b.meta is not None else msgspec.structs.replace(b, meta=meta)
                   for b in batches]
        return await self._gatherer.put(stamped)

    @property
    def pending(self) -> int:
        """Callers queued for the next transaction."""
        return self._gatherer.pending

    async def _commit(self, units: list[Unit]) -> list[list[Recorded] | BaseException]:
        started = time.perf_counter()
        try:
            records = await self.log.record_batches([b for unit in units for b in unit])
        except Exception as exc:
            if len(units) == 1:
                return [exc]
            # All or nothing: nothing was written. Find out whose batches failed by
            # recording each caller's alone; the others still succeed.
            return [await self._alone(unit) for unit in units]
        self._done(started, len(units))
        outcomes: list[list[Recorded] | BaseException] = []
        i = 0
        for unit in units:
            n = sum(len(b.events) for b in unit)
            outcomes.append(records[i:i + n])
            i += n
        return outcomes

    async def _alone(self, unit: Unit) -> list[Recorded] | BaseException:
        started = time.perf_counter()
        try:
            records = await self.log.record_batches(unit)
        except Exception as exc:  # handed to its caller, who maps it to a response
            return exc
        self._done(started, 1)
        return records

    def _done(self, started: float, callers: int) -> None:
        self.transactions += 1
        if self._observe is not None:
            self._observe(time.perf_counter() - started, callers)

    # ------------------------------------------------------------------ the rest: the log's
    async def read(self, after: int = 0, limit: int = 1000, *, streams: Sequence[str] | None = None,
                   types: Iterable[str] | None = None, owner: str | None = None,
                   until: int | None = None) -> list[Recorded]:
        return await self.log.read(after, limit, streams=streams, types=types, owner=owner, until=until)

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        return await self.log.read_stream(stream, after_version)

    async def stream_version(self, stream: str) -> int:
        return await self.log.stream_version(stream)

    async def head_position(self) -> int:
        return await self.log.head_position()

    def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None, batch: int = 500,
                  poll_interval: float | None = None) -> AsyncIterator[Recorded]:
        if poll_interval is None:  # the wrapped log's own default
            return self.log.subscribe(after, types=types, batch=batch)
        return self.log.subscribe(after, types=types, batch=batch, poll_interval=poll_interval)

    async def claim_lease(self, name: str, holder: str, ttl_s: float, *,
                          on_new_leader: AppendBatch | None = None) -> bool:
        return await self.log.claim_lease(name, holder, ttl_s, on_new_leader=on_new_leader)

    async def release_lease(self, name: str, holder: str) -> None:
        await self.log.release_lease(name, holder)

    async def close(self) -> None:
        """Stops the gathering; the wrapped log is its owner's to close."""
        await self._gatherer.close()


if TYPE_CHECKING:  # mypy holds it to the interface it wraps (here: protocol.py cannot import it back)
    _is_a_log: type[EventLog] = GroupCommitLog
