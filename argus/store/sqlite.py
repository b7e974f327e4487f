"""The event store: an append-only log in SQLite (WAL), with projections written inline.

Writes go through one connection (``SqliteWriter``): each append is one transaction, run
on the event loop's thread when the write lock is free and on the writer's thread when it
must wait. ``BEGIN IMMEDIATE`` takes SQLite's write lock before the next position is read,
so commit order equals position order across threads *and* processes (no gaps, no
interleaving), and the projections and consumer checkpoint are written in the same
transaction as the events they reflect (the transaction's body is ``argus.store.append``).
Reads go through a pool of read connections (``readers.ReadPool``): none waits behind another.

Durability is explicit: ``synchronous=FULL`` (default) fsyncs the WAL on every commit, so
an acknowledged append survives power loss; ``NORMAL`` survives a process crash only.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Sequence, TypeVar

from argus.events import EventBase, EventMeta, Recorded
from argus.store.append import AppendBatch, Appender
from argus.store.errors import IsACopy
from argus.store.follow import follow_log
from argus.store.integrity import Damage, HighWater, LogDamaged, check_log, record_verified
from argus.store.migrate import migrate
from argus.store.hooks import ReadModels
from argus.store.log import EVENT_COLUMNS, decode_row
from argus.store.readers import ReadPool
from argus.store.writer import SqliteWriter

__all__ = ["AppendBatch", "EventStore", "ON_DAMAGE", "SYNCHRONOUS_MODES"]

T = TypeVar("T")
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
DEFAULT_MAX_PAYLOAD = 1_048_576
ON_DAMAGE = ("refuse", "serve_reads")


def _refuse_a_copy(path: str) -> None:
    """Raise IsACopy if the file at ``path`` is a host's copy of a shared log."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT url FROM copy_of").fetchone()
    finally:
        db.close()
    if row is not None:
        raise IsACopy(
            f"{path} is this host's copy of the event log shared through PostgreSQL at {row[0]}: "
            "give it the same v2.postgres.url (or ARGUS_V2__POSTGRES__URL) to use it. Written alone "
            "it would stop being a copy; to go back to SQLite alone, export the shared log and "
            "import it into a new file (docs/operations.md)")


class EventStore:
    """Append, read and subscribe to the log, keeping ``read_models`` in the same
    transactions. Open with ``await EventStore.open(path, read_models)`` (or, with the
    read models of this house, ``projections.open_store(path)``)."""

    is_copy = False  # a copy of a shared log (argus.store.mirror) opens its file as such
    damage: Damage | None = None  # found at start: then the store serves reads only
    _highwater: HighWater | None = None  # the positions acknowledged (argus.store.integrity)

    def __init__(
        self,
        path: str,
        writer: "SqliteWriter | _RefusingWriter",
        reader: ReadPool,
        read_models: ReadModels,
        max_payload_bytes: int,
    ) -> None:
        self.path = path
        self._writer = writer
        self._reader = reader
        self.read_models = read_models
        self._appender = Appender(read_models, max_payload_bytes)
        self.max_payload_bytes = max_payload_bytes
        self._appended = asyncio.Event()
        self.appends_total = 0  # transactions appended by this store (group commit shares one)

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    async def open(
        cls,
        path: str | Path,
        read_models: ReadModels,
        *,
        synchronous: str = "FULL",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        on_damage: str = "refuse",
    ) -> "EventStore":
        """Check the log (``argus.store.integrity.check_log``), migrate the schema, connect,
        and let the read models catch up with the log (rebuild any whose code version
        changed or that fell behind). A damaged log raises ``LogDamaged``, or with
        ``on_damage="serve_reads"`` opens for reads only: nothing is written to the file."""
        synchronous = synchronous.upper()
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        if on_damage not in ON_DAMAGE:
            raise ValueError(f"on_damage must be one of {ON_DAMAGE}, not {on_damage!r}")
        path = str(path)
        check = None
        if not cls.is_copy:  # a copy's log is PostgreSQL's: the copy is made anew from it
            check = check_log(path)
            if check.damage is not None:
                if on_damage != "serve_reads":
                    raise LogDamaged(path, check.damage)
                return cls._open_damaged(path, read_models, max_payload_bytes, check.damage)
        migrate(path)
        if not cls.is_copy:
            _refuse_a_copy(path)
        writer = SqliteWriter(path, synchronous)
        reader = ReadPool(path)
        try:
            store = cls(path, writer, reader, read_models, max_payload_bytes)
            await writer.long_transaction(read_models.catch_up)
            if check is not None:
                await writer.transaction(record_verified, check.head)
                store._highwater = HighWater(path, fsync=synchronous in ("FULL", "EXTRA"))
                store._highwater.advance(check.head)
        except BaseException:
            # A log that cannot be folded (an undecodable row, say): close what was opened,
            # or the connections' threads would keep the process alive.
            writer.close()
            reader.close()
            raise
        return store

    @classmethod
    def _open_damaged(cls, path: str, read_models: ReadModels, max_payload_bytes: int,
                      damage: Damage) -> "EventStore":
        """The store of a damaged log, for reads only: its file is opened read-only and
        every write raises ``LogDamaged`` (the read models stay as they were)."""
        store = cls(path, _RefusingWriter(path, damage), ReadPool(path, read_only_file=True), read_models,
                    max_payload_bytes)
        store.damage = damage
        return store

    async def close(self) -> None:
        self._writer.close()
        self._reader.close()
        if self._highwater is not None:
            self._highwater.close()
            self._highwater = None

    async def __aenter__(self) -> "EventStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(sqlite3_connection, *args)`` on the writer's thread, as one unit."""
        return await self._writer.in_thread(fn, *args)

    async def _read_run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._reader.run(lambda conn: fn(conn, *args))

    # ------------------------------------------------------------------ writing
    async def append(
        self,
        stream: str,
        expected_version: int | None,
        events: Sequence[EventBase],
        *,
        owner: str | None = None,
        meta: EventMeta | None = None,
        checkpoint: tuple[str, int] | None = None,
    ) -> list[int]:
        """Append ``events`` to ``stream`` atomically; return their positions.

        ``expected_version`` is the stream's current version (0 for a new stream) or None.
        Raises ConcurrencyConflict, PayloadTooLarge or InvariantViolation; then nothing
        is written."""
        batch = AppendBatch(stream=stream, expected_version=expected_version, events=events, owner=owner)
        return await self.append_batches([batch], meta=meta, checkpoint=checkpoint)

    async def append_batches(
        self,
        batches: Sequence[AppendBatch],
        *,
        meta: EventMeta | None = None,
        checkpoint: tuple[str, int] | None = None,
    ) -> list[int]:
        """Append to several streams in one transaction (all or nothing). ``checkpoint``
        ``(consumer, position)`` is stored with the events, never moving backwards."""
        return [r.position for r in await self.record_batches(batches, meta=meta, checkpoint=checkpoint)]

    async def record_batches(
        self,
        batches: Sequence[AppendBatch],
        *,
        meta: EventMeta | None = None,
        checkpoint: tuple[str, int] | None = None,
    ) -> list[Recorded]:
        """``append_batches``, returning the events as a reader would read them back: a
        consumer that wrote them folds them without reading its own writes again."""
        encoded = self._appender.prepare(batches, meta)
        records = await self._writer.transaction(self._appender.write, encoded, checkpoint)
        self.appends_total += 1
        self._notify()
        if records and self._highwater is not None:
            # Positions never given twice (argus.store.integrity): the high-water mark is
            # on disk past these before the caller is answered.
            self._highwater.stage(records[-1].position)
            await self._highwater.durable(records[-1].position)
        return records

    def append_signal(self) -> asyncio.Event:
        """An event set by the next append in this process. Take it *before* reading, then
        wait on it, so that an append between the read and the wait is not missed."""
        return self._appended

    async def read_snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` with the reader's sqlite3 connection (for consistent multi-table reads
        inside one read transaction)."""
        return await self._read_run(fn)

    def _notify(self) -> None:
        # Wake every in-process subscriber; each re-reads from its own cursor.
        self._appended.set()
        self._appended = asyncio.Event()

    async def claim_lease(
        self, name: str, holder: str, ttl_s: float, *, on_new_leader: AppendBatch | None = None,
        now: float | None = None,
    ) -> bool:
        """Take or renew lease ``name`` for ``holder`` unless someone else holds it unexpired.
        When the holder changes, ``on_new_leader`` is appended in the same transaction.
        ``now``: the claimer's clock (default: the wall clock); every claimer of one lease
        must use the same one."""

        encoded = self._appender.prepare([on_new_leader] if on_new_leader else [], None)

        def claim(db: sqlite3.Connection) -> tuple[bool, int]:
            at = time.time() if now is None else now
            row = db.execute("SELECT holder, lease_until FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != holder and row[1] > at:
                return False, 0  # the transaction commits nothing
            db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)", (name, holder, at + ttl_s))
            if encoded and (row is None or row[0] != holder):
                return True, self._appender.write(db, encoded, None)[-1].position
            return True, 0

        held, appended = await self._writer.transaction(claim)
        if held and encoded:
            self._notify()
        if appended and self._highwater is not None:
            self._highwater.stage(appended)
            await self._highwater.durable(appended)
        return held

    async def release_lease(self, name: str, holder: str) -> None:
        await self._writer.transaction(
            lambda db: db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))
        )

    # ------------------------------------------------------------------ reading
    async def read(
        self,
        after: int = 0,
        limit: int = 1000,
        *,
        streams: Sequence[str] | None = None,
        types: Iterable[str] | None = None,
        owner: str | None = None,
        until: int | None = None,
    ) -> list[Recorded]:
        """Events after position ``after`` in order, at most ``limit``, filtered. Every
        filter but ``streams`` is applied while walking the log by position from ``after``
        (bound it with ``until`` where the caller can)."""
        where = ["position > ?"]
        params: list[object] = [after]
        if streams is not None:
            where.append(f"stream IN ({','.join('?' * len(streams))})")
            params.extend(streams)
        if types is not None:
            names = list(types)
            where.append(f"type IN ({','.join('?' * len(names))})")
            params.extend(names)
        if owner is not None:
            where.append("owner = ?")
            params.append(owner)
        if until is not None:
            where.append("position <= ?")
            params.append(until)
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY position LIMIT ?"
        params.append(limit)
        rows = await self._reader.fetchall(sql, params)
        return [decode_row(r) for r in rows]

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        rows = await self._reader.fetchall(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream = ? AND version > ? ORDER BY version",
            (stream, after_version),
        )
        return [decode_row(r) for r in rows]

    async def stream_version(self, stream: str) -> int:
        rows = await self._reader.fetchall(
            "SELECT coalesce(max(version), 0) FROM events WHERE stream = ?", (stream,)
        )
        return int(list(rows)[0][0])

    async def head_position(self) -> int:
        rows = await self._reader.fetchall("SELECT coalesce(max(position), 0) FROM events")
        return int(list(rows)[0][0])

    async def catch_up(self) -> bool:
        """Bring the read models up to the log's head now; whether anything new came.
        Never here: this file is the log. A copy of a shared log (``MirroredStore``) asks
        the log for what it lacks (a token issued on another host a moment ago, say)."""
        return False

    async def checkpoint(self, consumer: str) -> int:
        rows = list(
            await self._reader.fetchall(
                "SELECT position FROM subscriber_checkpoints WHERE name = ?", (consumer,)
            )
        )
        return int(rows[0][0]) if rows else 0

    async def subscribe(
        self,
        after: int = 0,
        *,
        types: Iterable[str] | None = None,
        batch: int = 500,
        poll_interval: float = 0.05,
    ) -> AsyncIterator[Recorded]:
        """Every event after ``after``, then every new one as it is appended: catch-up and
        live are the same loop. Appends from this process wake it at once; appends from
        other processes are seen within ``poll_interval``."""
        async for rec in follow_log(self.read, lambda: self._appended, after=after, types=types, batch=batch,
                                    poll_interval=poll_interval):
            yield rec

    # ------------------------------------------------------------------ read models
    async def rebuild(self) -> int:
        """Recompute every read model from the log (inside one transaction)."""
        return await self._writer.long_transaction(self.read_models.rebuild)


class _RefusingWriter:
    """The writer of a damaged log: every write raises ``LogDamaged``; nothing is opened."""

    def __init__(self, path: str, damage: Damage) -> None:
        self.path, self.damage = path, damage

    async def transaction(self, body: Callable[..., T], *args: Any) -> T:
        raise LogDamaged(self.path, self.damage)

    async def long_transaction(self, body: Callable[..., T], *args: Any) -> T:
        raise LogDamaged(self.path, self.damage)

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        raise LogDamaged(self.path, self.damage)

    def close(self) -> None:
        pass
