"""The event log on PostgreSQL (issue: beyond one control-plane host), first layer: the log
itself, behind the same calls as ``EventStore``'s log (``append_batches``,
``record_batches``, ``read``, ``read_stream``, ``stream_version``, ``head_position``) and
held to the same contract (``tests/store/log_contract.py``). It keeps no read models: each
process keeps them in its own copy of this log (``argus.store.mirror``).

- **Append-only in the database**: triggers refuse UPDATE, DELETE and TRUNCATE, and an
  INSERT whose positions are not gapless after the head (``migrations/postgres``).
- **Gapless positions in commit order under concurrent writers, in one round trip**:
  ``argus_append_numbered`` takes a transaction-scoped advisory lock (eventsourcing's
  recorder takes a table lock; both are measured), reads the head and the streams'
  versions, checks the versions the batches expect and inserts the rows numbered from
  them; the client numbers the events as recorded the same way from what it returns (as
  SQLite's store, ``append.number_events``). Appends so commit one after another, each
  right after the one before it; readers are never blocked.
- **Encoded and validated as SQLite's store does** (``Appender.prepare``): an event that
  would not decode never reaches the log.

The driver is asyncpg. ``migrate`` applies ``migrations/postgres/NNNN_*.sql`` in order,
each in its own transaction, under a second advisory lock so that processes opening a
fresh database at once do not race.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from importlib import resources
from typing import Any

from argus.events import EventMeta, Recorded, decode_event
from argus.store.append import AppendBatch, Appender, PreparedBatch, number_events
from argus.store.dbfile import NotEmpty
from argus.store.errors import ConcurrencyConflict
from argus.store.follow import follow_log
from argus.store.log import EVENT_COLUMNS, decode_row

__all__ = ["APPEND_LOCK", "PostgresEventLog", "describe_open_failure", "migrate_postgres"]

APPEND_LOCK = 0x41524755  # "ARGU": the advisory lock every append holds to its commit
_MIGRATE_LOCK = 0x41524756
_SERIALISE = ("advisory", "table")  # how an append takes its turn (migrations/postgres/0004)
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_APPEND = ("SELECT head, stream, version FROM argus_append_numbered($1::text[], $2::int[], $3::int[], $4::text[], "
           "$5::int[], $6::bytea[], $7::bytea[], $8::text[], $9::float8, $10::boolean)")
_CONFLICT = "AG002"  # argus_append_numbered: a stream is not at the version a batch expects
_CHANNEL = "argus_events"  # each append notifies it with its last position (migrations/postgres/0004)
_LOAD = (f"INSERT INTO events ({EVENT_COLUMNS}) SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], "
         "$4::text[], $5::int[], $6::bytea[], $7::bytea[], $8::text[], $9::float8[])")


def _check_decodes(row: tuple[object, ...]) -> None:
    position, _, _, type_, schema, data = row[:6]
    try:
        decode_event(type_, schema, data)  # type: ignore[arg-type]
    except Exception as exc:  # an unknown type, a payload that does not match it
        raise ValueError(f"position {position}: {exc}") from exc


def describe_open_failure(url: str, exc: BaseException) -> str:
    """One line for a failure to open the log at ``url`` (password hidden), saying what to
    change: the driver missing, a server that does not answer, a refused login, no such
    database."""
    from argus.config import hide_secrets

    return hide_secrets(_open_failure(url, exc), url)


def _open_failure(url: str, exc: BaseException) -> str:
    from argus.config import redact_url

    where = f"the PostgreSQL log at {redact_url(url)}"
    if isinstance(exc, ImportError):
        return f"cannot open {where}: its driver is not installed: pip install -e '.[postgres]' ({exc})"
    name = type(exc).__name__
    if name in ("InvalidPasswordError", "InvalidAuthorizationSpecificationError"):
        return f"{where} refused the login ({exc}): check the user and password in the URL"
    if name == "InvalidCatalogNameError":
        return f"{where}: {exc}: create it first (createdb -O <user> <database>, docs/operations.md)"
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return (f"{where} did not answer ({name}: {exc}): is PostgreSQL running, and are the host and "
                "port in the URL right?")
    return f"cannot open {where}: {name}: {exc}"


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

    def __init__(self, pool: Any, max_payload_bytes: int, serialise: str = "advisory") -> None:
        if serialise not in _SERIALISE:
            raise ValueError(f"serialise: one of {', '.join(_SERIALISE)}, not {serialise!r}")
        self._pool = pool
        self._appender = Appender(_NoReadModels(), max_payload_bytes)
        self._table_lock = serialise == "table"

    @classmethod
    async def open(cls, dsn: str, *, pool_size: int = 4, max_payload_bytes: int = 1 << 20,
                   serialise: str = "advisory") -> "PostgresEventLog":
        """``serialise``: how appends take turns, ``advisory`` (a transaction-scoped
        advisory lock, the default) or ``table`` (``LOCK TABLE events IN EXCLUSIVE MODE``,
        as eventsourcing's recorder); ``python tests/bench/bench_store.py --backend
        postgres`` measures both."""
        import asyncpg  # the postgres extra: only this backend needs it

        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=pool_size)
        async with pool.acquire() as conn:
            await migrate_postgres(conn)
        return cls(pool, max_payload_bytes, serialise)

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
        return await self.record_prepared(self._appender.prepare(batches, meta))

    async def record_prepared(self, prepared: list[PreparedBatch]) -> list[Recorded]:
        """``record_batches`` of batches already encoded and validated (``Appender.prepare``),
        as a store that tried them first on its copy has (``argus.store.mirror``)."""
        if not prepared:
            return []
        async with self._pool.acquire() as conn:
            return await self._append(conn, prepared)

    async def _append(self, conn: Any, prepared: list[PreparedBatch]) -> list[Recorded]:
        """Insert ``prepared`` with ``argus_append_numbered``, which numbers the rows under the
        append lock (one round trip); number the events as recorded the same way from the
        head and versions it read."""
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
        streams, ks, expected, types, schemas, datas, metas, owners = columns
        seen: dict[str, int] = {}
        for item in prepared:
            stream, check = item.batch.stream, item.batch.expected_version
            for type_, schema, data, _, _ in item.events:
                seen[stream] = k = seen.get(stream, 0) + 1
                streams.append(stream)
                ks.append(k)
                expected.append(check)
                check = None  # a batch's events follow each other: its first one is checked
                types.append(type_)
                schemas.append(schema)
                datas.append(data)
                metas.append(item.meta_bytes)
                owners.append(item.batch.owner)
        now = time.time()
        try:
            found = await conn.fetch(_APPEND, *columns, now, self._table_lock)
        except Exception as exc:  # asyncpg's PostgresError; its class is imported lazily
            if getattr(exc, "sqlstate", None) != _CONFLICT:
                raise
            stream, want, actual = str(getattr(exc, "detail", "")).rsplit(" ", 2)
            raise ConcurrencyConflict(stream, int(want), int(actual)) from None
        _, records, _ = number_events(prepared, int(found[0][0]), {r[1]: int(r[2]) for r in found}, now)
        return records

    async def claim_lease(self, name: str, holder: str, ttl_s: float, *,
                          on_new_leader: AppendBatch | None = None) -> bool:
        """Take or renew lease ``name`` for ``holder`` unless someone else holds it
        unexpired, by the database's clock (the same for claimers on every host). When the
        holder changes, ``on_new_leader`` is appended in the same transaction."""
        prepared = self._appender.prepare([on_new_leader] if on_new_leader else [], None)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO leases VALUES ($1, '', 0) ON CONFLICT (name) DO NOTHING", name)
            row = await conn.fetchrow(
                "SELECT holder, lease_until, extract(epoch FROM clock_timestamp())::float8 AS now "
                "FROM leases WHERE name = $1 FOR UPDATE", name)
            if row["holder"] not in ("", holder) and row["lease_until"] > row["now"]:
                return False
            await conn.execute("UPDATE leases SET holder = $2, lease_until = $3 WHERE name = $1",
                               name, holder, row["now"] + ttl_s)
            if prepared and row["holder"] != holder:
                await self._append(conn, prepared)
            return True

    async def release_lease(self, name: str, holder: str) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute("UPDATE leases SET holder = '', lease_until = 0 WHERE name = $1 AND holder = $2",
                               name, holder)

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

    async def subscribe(self, after: int = 0, *, types: Iterable[str] | None = None, batch: int = 500,
                        poll_interval: float = 5.0) -> AsyncIterator[Recorded]:
        """Every event after ``after``, then every new one as it is appended, by any
        process on any host: woken by the database's notification of each append (LISTEN
        argus_events), with a poll every ``poll_interval`` only as a safety net."""
        async with self.listening() as woken:
            def armed() -> asyncio.Event:
                woken.clear()  # before each read: a notification after it is kept
                return woken

            async for rec in follow_log(self.read, armed, after=after, types=types, batch=batch,
                                        poll_interval=poll_interval):
                yield rec

    @contextlib.asynccontextmanager
    async def listening(self) -> AsyncIterator[asyncio.Event]:
        """An ``asyncio.Event`` set by the notification of every append, from any process
        on any host, while inside (LISTEN argus_events on a connection held meanwhile).
        Clear it before reading the log, then wait on it: nothing is missed."""
        woken = asyncio.Event()
        listener = await self._pool.acquire()  # LISTEN is per connection

        def notified(*_: object) -> None:
            woken.set()

        await listener.add_listener(_CHANNEL, notified)
        try:
            yield woken
        finally:
            await listener.remove_listener(_CHANNEL, notified)
            await self._pool.release(listener)

    async def rows_after(self, after: int, limit: int) -> list[tuple[object, ...]]:
        """Up to ``limit`` stored rows (``EVENT_COLUMNS``, bytes as stored) after position
        ``after``, in order: what a local copy of the log lacks (``argus.store.mirror``)."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(f"SELECT {EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position "
                                    "LIMIT $2", after, limit)
        return [tuple(row) for row in rows]

    async def raw_rows(self, after: int = 0, until: int | None = None,
                       page: int = 5000) -> AsyncIterator[tuple[object, ...]]:
        """The stored rows (``EVENT_COLUMNS``, bytes as stored) after ``after`` up to
        ``until``, in order, from one snapshot however long the log (an export)."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            last = after
            while True:
                rows = await conn.fetch(f"SELECT {EVENT_COLUMNS} FROM events WHERE position > $1 AND position <= $2 "
                                        "ORDER BY position LIMIT $3", last, until if until is not None else 2**62, page)
                for row in rows:
                    yield tuple(row)
                if len(rows) < page:
                    return
                last = rows[-1][0]

    async def load_rows(self, rows: Iterable[tuple[object, ...]], page: int = 5000) -> tuple[int, int, int]:
        """Load stored rows (positions, versions, meta and recorded_at kept) into this log,
        which must be empty: all or nothing, in one transaction. Every event is decoded
        first (one that would not decode is refused by name). Returns (events, first
        position, last position). Raises NotEmpty, ValueError (a bad row), or the
        database's refusal (positions not gapless, a stream version twice)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
            if await conn.fetchval("SELECT count(*) FROM (SELECT 1 FROM events LIMIT 1) AS e"):
                raise NotEmpty("the target log is not empty: import into a new database")
            count, first, last = 0, 0, 0
            chunk: list[tuple[object, ...]] = []
            for row in rows:
                _check_decodes(row)
                chunk.append(row)
                if len(chunk) == page:
                    await conn.execute(_LOAD, *(list(column) for column in zip(*chunk)))
                    count, first, last = count + len(chunk), first or int(chunk[0][0]), int(chunk[-1][0])  # type: ignore[call-overload]
                    chunk = []
            if chunk:
                await conn.execute(_LOAD, *(list(column) for column in zip(*chunk)))
                count, first, last = count + len(chunk), first or int(chunk[0][0]), int(chunk[-1][0])  # type: ignore[call-overload]
        return count, first, last

    async def stream_version(self, stream: str) -> int:
        async with self._pool.acquire() as conn:
            return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream = $1", stream))

    async def head_position(self) -> int:
        async with self._pool.acquire() as conn:
            return int(await conn.fetchval("SELECT coalesce(max(position), 0) FROM events"))

