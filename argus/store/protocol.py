"""What every event log is: the one interface the SQLite store (``EventStore``, and its
copy of a shared log, ``MirroredStore``), the shared PostgreSQL log (``PostgresEventLog``)
and group commit over any of them (``GroupCommitLog``) implement, and what the contract
tests (tests/store/log_contract.py) hold each of them to. In the manner of ``eventsourcing``'s recorder interface: append,
read, subscribe, lease; nothing about read models."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from argus.events import EventBase, EventMeta, Recorded
from argus.store.append import AppendBatch

__all__ = ["EventLog", "Snapshots"]


@runtime_checkable
class EventLog(Protocol):
    """An append-only log of events in streams, each event at a global position."""

    async def append(self, stream: str, expected_version: int | None, events: Sequence[EventBase], *,
                     owner: str | None = None, meta: EventMeta | None = None) -> list[int]:
        """Append ``events`` to ``stream`` atomically (``expected_version``: the stream's
        version now, 0 for a new stream, None for any); their positions. Raises
        ConcurrencyConflict, PayloadTooLarge or InvalidEvent, and then writes nothing."""
        ...

    async def append_batches(self, batches: Sequence[AppendBatch], *,
                             meta: EventMeta | None = None) -> list[int]:
        """Several streams in one transaction, all or nothing; the positions."""
        ...

    async def record_batches(self, batches: Sequence[AppendBatch], *,
                             meta: EventMeta | None = None) -> list[Recorded]:
        """``append_batches``, returning the events as a reader reads them back."""
        ...

    async def read(self, after: int = 0, limit: int = 1000, *, streams: Sequence[str] | None = None,
                   types: Iterable[str] | None = None, owner: str | None = None,
                   until: int | None = None) -> list[Recorded]:
        """Events after position ``after``, in order, at most ``limit``, filtered."""
        ...

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        """One stream's events after ``after_version``, in order."""
        ...

    async def stream_version(self, stream: str) -> int:
        """The stream's version (0: no such stream)."""
        ...

    async def head_position(self) -> int:
        """The position of the last event (0: empty)."""
        ...

    def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None, batch: int = 500,
                  poll_interval: float = ...) -> AsyncIterator[Recorded]:
        """Every event after ``after``, then every new one as it is appended."""
        ...

    async def claim_lease(self, name: str, holder: str, ttl_s: float, *,
                          on_new_leader: AppendBatch | None = None) -> bool:
        """Take or renew lease ``name`` for ``holder`` unless another holds it unexpired;
        ``on_new_leader`` is appended in the same transaction when the holder changes."""
        ...

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it."""
        ...

    async def close(self) -> None:
        ...


T = TypeVar("T")


class Snapshots(Protocol):
    """A log whose read models are kept beside it in SQLite (``EventStore``,
    ``MirroredStore``): one read transaction of them at a time. Only the read models'
    typed faces use it (``projections.reads``, ``argus.views.reads``)."""

    async def read_snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn``'s answer, run on a reader's connection inside one read transaction."""
        ...


if TYPE_CHECKING:  # mypy holds every backend to the interface (tests/test_types.py runs it)
    from argus.store.mirror import MirroredStore
    from argus.store.postgres import PostgresEventLog
    from argus.store.sqlite import EventStore

    _backends: tuple[type[EventLog], ...] = (EventStore, MirroredStore, PostgresEventLog)
    _with_read_models: tuple[type[Snapshots], ...] = (EventStore, MirroredStore)

