"""The event log on PostgreSQL (issue: beyond one control-plane host), first layer: the log
itself, behind the same calls as ``EventStore``'s log (``append_batches``,
``record_batches``, ``read``, ``read_stream``, ``stream_version``, ``head_position``) and
held to the same contract (``tests/store/log_contract.py``). The read models (projections)
are not kept here yet: the service still runs on SQLite.

- **Append-only in the database**: triggers refuse UPDATE, DELETE and TRUNCATE, and an
  INSERT whose positions are not gapless after the head (``migrations/postgres``).
- **Gapless positions in commit order under concurrent writers**: every append takes one
  transaction-scoped advisory lock before it reads the head, so appends commit one after
  another, each right after the one before it (as eventsourcing's Postgres recorder does
  with a table lock). Readers are never blocked.
- **Encoded and validated as SQLite's store does** (``Appender.prepare``): an event that
  would not decode never reaches the log.

The driver is asyncpg. ``migrate`` applies ``migrations/postgres/NNNN_*.sql`` in order,
each in its own transaction, under a second advisory lock so that processes opening a
fresh database at once do not race.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from argus.events import EventMeta, Recorded
from argus.store.append import AppendBatch, Appender, number_events
from argus.store.log import EVENT_COLUMNS, decode_row

__all__ = ["APPEND_LOCK", "PostgresEventLog", "migrate_postgres"]

APPEND_LOCK = 0x41524755  # "ARGU": the advisory lock every append holds to its commit
_MIGRATE_LOCK = 0x41524756
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_INSERT = (f"INSERT INTO events ({EVENT_COLUMNS}) SELECT * FROM unnest("
           "$1::bigint[], $2::text[], $3::int[], $4::text[], $5::int[], $6::bytea[], $7::bytea[], $8::text[], "
           "$9::float8[])")


class _NoReadModels:
    """This log keeps no read models: nothing is folded in its transactions."""

    def folds(self, event_type: str) -> bool:
        return False

    def apply(self, db: sqlite3.Connection, records: Sequence[Recorded]) -> None:
        raise AssertionError("no read models are kept on PostgreSQL yet")

    def catch_up(self, db: sqlite3.Connection) -> list[str]:
        return []

    def rebuild(self, db: sqlite3.Connection) -> int:
        return 0


def _migrations() -> list[tuple[int, str, str]]:
    root = resources.files("migrations").joinpath("postgres")
    found = []
    for entry in root.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found)


async def migrate_postgres(conn: Any) -> int:
    """Bring the database at ``conn`` (an asyncpg connection) to this code's schema;
    returns its version."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATE_LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                           "name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)")
        current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
        for version, name, sql in _migrations():
            if version > current:
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations VALUES ($1, $2, $3)", version, name, time.time())
                current = version
    return int(current)


class PostgresEventLog:
    """The append-only event log in a PostgreSQL database (``dsn``)."""

    def __init__(self, pool: Any, max_payload_bytes: int) -> None:
        self._pool = pool
        self._appender = Appender(_NoReadModels(), max_payload_bytes)

    @classmethod
    async def open(cls, dsn: str, *, pool_size: int = 4, max_payload_bytes: int = 1 << 20) -> "PostgresEventLog":
        import asyncpg  # the postgres extra: only this backend needs it

        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=pool_size)
        async with pool.acquire() as conn:
            await migrate_postgres(conn)
        return cls(pool, max_payload_bytes)

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> "PostgresEventLog":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ writing
    async def append(self, stream: str, expected_version: int | None, events: Sequence[Any], *,
                     owner: str | None = None, meta: EventMeta | None = None) -> list[int]:
        """Append ``events`` to ``stream`` atomically; their positions (as EventStore)."""
        return await self.append_batches([AppendBatch(stream=stream, expected_version=expected_version,
                                                      events=events, owner=owner)], meta=meta)

    async def append_batches(self, batches: Sequence[AppendBatch], *, meta: EventMeta | None = None) -> list[int]:
        return [r.position for r in await self.record_batches(batches, meta=meta)]

    async def record_batches(self, batches: Sequence[AppendBatch], *,
                             meta: EventMeta | None = None) -> list[Recorded]:
        """Several streams in one transaction, all or nothing; the events as recorded.
        Raises ConcurrencyConflict, PayloadTooLarge or InvalidEvent; then nothing is
        written."""
        prepared = self._appender.prepare(batches, meta)
        if not prepared:
            return []
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", APPEND_LOCK)
            streams = list(dict.fromkeys(item.batch.stream for item in prepared))
            head = await conn.fetchval("SELECT coalesce(max(position), 0) FROM events")
            versions = {s: 0 for s in streams}
            for stream, version in await conn.fetch(
                    "SELECT stream, max(version) FROM events WHERE stream = ANY($1::text[]) GROUP BY stream", streams):
                versions[stream] = version
            rows, records, _ = number_events(prepared, int(head), versions, time.time())
            await conn.execute(_INSERT, *(list(column) for column in zip(*rows)))
        return records

    # ------------------------------------------------------------------ reading
    async def read(self, after: int = 0, limit: int = 1000, *, streams: Sequence[str] | None = None,
                   types: Iterable[str] | None = None, owner: str | None = None,
                   until: int | None = None) -> list[Recorded]:
        """Events after position ``after`` in order, at most ``limit``, filtered."""
        where, params = ["position > $1"], [after]  # type: list[str], list[object]
        for column, value in (("stream", list(streams) if streams is not None else None),
                              ("type", list(types) if types is not None else None)):
            if value is not None:
                params.append(value)
                where.append(f"{column} = ANY(${len(params)}::text[])")
        if owner is not None:
            params.append(owner)
            where.append(f"owner = ${len(params)}")
        if until is not None:
            params.append(until)
            where.append(f"position <= ${len(params)}")
        params.append(limit)
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY position LIMIT ${len(params)}"
        async with self._pool.acquire() as conn:
            return [decode_row(r) for r in await conn.fetch(sql, *params)]

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(f"SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND version > $2 "
                                    "ORDER BY version", stream, after_version)
        return [decode_row(r) for r in rows]

    async def stream_version(self, stream: str) -> int:
        async with self._pool.acquire() as conn:
            return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream = $1", stream))

    async def head_position(self) -> int:
        async with self._pool.acquire() as conn:
            return int(await conn.fetchval("SELECT coalesce(max(position), 0) FROM events"))

