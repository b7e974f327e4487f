"""The event log on PostgreSQL, shared by every host; each process reads a local copy.

Several API processes and reactors on different hosts share one log in PostgreSQL
(``PostgresEventLog``): it decides what must be decided in one place (positions,
stream versions and so conflicts, leases on the database's clock) and notifies every
append. Each process keeps a *copy* of that log in a local SQLite file, with the read
models kept in the copy's own transactions, exactly as a single-host Argus keeps them
(``EventStore``): every reader, every list's index and keyset page, the queue, replay
and the reactor's state read the copy, unchanged, and a read costs no network round trip.

Why a copy and not the read models in PostgreSQL: the read side is SQLite's (its SQL,
its indexes, its measured latencies), and a read model is a cache of the log by
definition: a copy that is rebuilt from the log when lost or when its code changes. What
must be shared is the log alone.

- **Writes**: an append is first tried on the copy in a transaction that is rolled back
  (the same version checks and the read models' invariants as SQLite's store: an event the
  read models refuse never reaches the shared log), then appended to PostgreSQL, which
  decides; the copy then catches up to it before the call returns, so a process reads its
  own writes. A batch with no expected version is sent with the version the copy judged it
  at: another host may append to its stream in between, and PostgreSQL, which folds
  nothing, would otherwise take an event the read models refuse at the stream's real head
  (every copy would then refuse it for ever). Every read model's rule is about one stream
  (a task's, a user's), so a version check on each stream makes the copy's judgment the
  one a fold in PostgreSQL's transaction would make; when a stream moved, the append is
  judged again on the copy, caught up.
- **Following**: a task copies what the copy lacks, page by page (each page with its read
  models in one local transaction, positions kept), whenever PostgreSQL notifies an
  append (LISTEN), and every ``poll_interval`` as a safety net; each page wakes the
  process's subscribers (SSE, the reactor) as a local append does.
- **Leases** are PostgreSQL's (``claim_lease`` on the database clock), so a standby
  reactor on another host takes over when the leader's lease runs out.
- **A copy of another log is refused** at open: its last event must be the shared log's
  event at that position.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import AsyncIterator, Sequence

import msgspec

from argus.config import redact_url
from argus.events import EventMeta, Recorded
from argus.store.append import AppendBatch, PreparedBatch
from argus.events.codec import EventDecodeError, UnknownEventType
from argus.store.errors import ConcurrencyConflict, InvariantViolation, LogUnreachable, StoreError
from argus.store.hooks import ReadModels
from argus.store.log import EVENT_COLUMNS, decode_row, head_position
from argus.store.migrate import migrate
from argus.store.postgres import PostgresEventLog
from argus.store.sqlite import DEFAULT_MAX_PAYLOAD, EventStore

__all__ = ["CopyCannotFollow", "MirroredStore", "NotACopy"]

log = logging.getLogger(__name__)

_INSERT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"
_PAGE = 2000  # events copied per local transaction
# A copy further behind than this at open is made in bulk: every row first, then the read
# models rebuilt from them (the rebuild's bulk path), instead of folding page after page.
# A new copy (no file yet) gets its rows committed before the store opens, which then
# builds the read models as at any open (in parallel on a long log); an existing copy far
# behind, in one transaction with its read models (never rows without them).
BULK_COPY = 20_000
# Tries of an append whose unchecked streams other hosts keep moving between its trial on
# the copy and PostgreSQL's check; then ConcurrencyConflict, as for a checked stream.
RACE_TRIES = 20


def _connection_errors() -> tuple[type[BaseException], ...]:
    import asyncpg

    return (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
            asyncpg.exceptions.OperatorInterventionError)


_UNREACHABLE = _connection_errors()


async def _rows_after(shared: PostgresEventLog, head: int) -> list[tuple[object, ...]]:
    """Every row of the shared log after ``head``, a page at a time. Not ``raw_rows`` (one
    snapshot, row by row through an async generator): the same fetch, but the rows it
    makes fold about 30 % slower afterwards (measured, 200,000 events, fold and writes)."""
    rows: list[tuple[object, ...]] = []
    while page := await shared.rows_after(head, 10 * _PAGE):
        rows += page
        head = int(page[-1][0])  # type: ignore[call-overload]
    return rows


def _seed_new_copy(path: str, url: str, rows: list[tuple[object, ...]]) -> None:
    """A new copy's rows, committed before its store opens: it has no read models yet, so
    opening builds them all from these rows (in parallel on a long log), and a crash in
    between leaves nothing that claims to be up to date."""
    migrate(path)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.executemany(_INSERT, _after_head(db, rows))  # another process may have seeded it meanwhile
        _mark_copy(db, url)
        db.execute("COMMIT")
    finally:
        db.close()


def _after_head(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The ``rows`` (consecutive, from the shared log) that follow the copy's head as read in
    this transaction: another process on this host may share the copy's file (an API and a
    reactor with one configuration) and have copied some of them meanwhile."""
    head = head_position(db)
    return [r for r in rows if int(r[0]) > head]  # type: ignore[call-overload]


def _private_copy(path: Path) -> bool:
    """Make the copy's file 0600 (its owner's alone: it holds every user's specs and the
    tokens' hashes), created empty when missing (SQLite makes a new database of an empty
    file, and its ``-wal`` and ``-shm`` with the database's mode); an existing copy's
    files lose any group or other access. Returns whether the file was new."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
        new = True
    except FileExistsError:
        new = os.path.getsize(path) == 0
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if os.stat(file).st_mode & 0o077:
                os.chmod(file, 0o600)
                log.warning("%s was readable by others; now 0600", file)
    return new


class NotACopy(StoreError):
    """The local file holds events the shared log does not: a copy of another log, or a
    file written without the shared log since."""


class CopyCannotFollow(LogUnreachable):
    """The copy cannot take events of the shared log (its read models refuse them, or
    their type is unknown here): the hosts on one log run different Argus versions. Reads
    go on from the copy as it was; writes are refused, nothing written (the API: 503)."""


_UNREACHABLE_OR_STUCK: tuple[type[BaseException], ...] = (*_UNREACHABLE, CopyCannotFollow)


def _mark_copy(db: sqlite3.Connection, url: str) -> None:
    """Say in the file that it is a copy of the log at ``url`` (EventStore refuses to open
    it alone), in the caller's transaction."""
    db.execute("INSERT INTO copy_of VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET url = excluded.url, "
               "marked_at = excluded.marked_at", (redact_url(url), time.time()))


class _TriedOnly(Exception):
    """Raised to roll back an append tried on the copy once it passed every check; holds
    the batches to send, each pinned to the stream version the copy judged it at."""

    def __init__(self, pinned: list[PreparedBatch]) -> None:
        super().__init__()
        self.pinned = pinned


def _pinned(prepared: list[PreparedBatch], records: Sequence[Recorded]) -> list[PreparedBatch]:
    """``prepared`` with each batch that had no expected version given the version its
    stream had before it, as numbered in ``records`` (one per event, in order)."""
    out: list[PreparedBatch] = []
    first = 0
    for item in prepared:
        if item.batch.expected_version is None:
            batch = msgspec.structs.replace(item.batch, expected_version=records[first].version - 1)
            item = msgspec.structs.replace(item, batch=batch)
        out.append(item)
        first += len(item.events)
    return out


class MirroredStore(EventStore):
    """An ``EventStore`` whose log is PostgreSQL's, read from a local copy. Open with
    ``await MirroredStore.open_mirrored(url, path, read_models)``."""

    is_copy = True
    _log: PostgresEventLog | None = None
    _follower: asyncio.Task[None] | None = None
    _copy_lock: asyncio.Lock | None = None
    _closing = False
    _wake: asyncio.Event | None = None  # the follower's: set to stop its wait
    poll_interval = 5.0

    @classmethod
    async def open_mirrored(
        cls,
        url: str,
        path: str | Path,
        read_models: ReadModels,
        *,
        synchronous: str = "FULL",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
    ) -> "MirroredStore":
        """Connect to the shared log at ``url``, open (or create) the local copy at
        ``path``, check that it is a copy of that log, and catch it up."""
        shared = await PostgresEventLog.open(url, max_payload_bytes=max_payload_bytes)
        try:
            new = _private_copy(Path(path))
            if new and await shared.head_position() >= BULK_COPY:
                rows = await _rows_after(shared, 0)
                await asyncio.to_thread(_seed_new_copy, str(path), url, rows)
            store = await cls.open(path, read_models, synchronous=synchronous, max_payload_bytes=max_payload_bytes)
        except BaseException:
            await shared.close()
            raise
        assert isinstance(store, MirroredStore)
        store._log, store._copy_lock = shared, asyncio.Lock()
        try:
            await store._check_copy(url)
            await store._writer.transaction(_mark_copy, url)
            await store._bulk_copy()
            await store.sync()
        except BaseException:
            await store.close()
            raise
        store._follower = asyncio.create_task(store._follow(), name=f"argus-mirror-{path}")
        return store

    async def close(self) -> None:
        # The follower is asked to stop, not cancelled: a task cancelled while asyncpg's
        # pool hands it a connection leaves the pool unable to close.
        self._closing = True
        if self._follower is not None:
            if self._wake is not None:
                self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._follower), 10)
            except asyncio.TimeoutError:
                self._follower.cancel()
                await asyncio.gather(self._follower, return_exceptions=True)
        if self._log is not None:
            await self._log.close()
        await super().close()

    @property
    def shared_log(self) -> PostgresEventLog:
        assert self._log is not None, "open with MirroredStore.open_mirrored"
        return self._log

    # ------------------------------------------------------------------ writing
    async def record_batches(
        self,
        batches: Sequence[AppendBatch],
        *,
        meta: EventMeta | None = None,
        checkpoint: tuple[str, int] | None = None,
    ) -> list[Recorded]:
        """Append to the shared log (all or nothing) once the copy, caught up, accepts the
        events; return them as recorded there, once the copy holds them. Raises
        ConcurrencyConflict, PayloadTooLarge, InvalidEvent or InvariantViolation; then
        nothing is written anywhere."""
        prepared = self._appender.prepare(batches, meta)
        unchecked = any(item.batch.expected_version is None for item in prepared)
        for attempt in itertools.count(1):
            async with self._reaching("nothing was written"):
                await self.sync()
            try:
                await self._writer.transaction(self._try, prepared)
            except _TriedOnly as tried:  # always: the trial is rolled back
                pinned = tried.pinned
            try:
                async with self._reaching("the append may or may not have been committed"):
                    records = await self.shared_log.record_prepared(pinned)
                break
            except ConcurrencyConflict:
                # A stream moved since the copy's trial. A checked one's conflict is the
                # caller's; an unchecked one is judged again at its new head.
                if not unchecked or attempt == RACE_TRIES:
                    raise
        try:
            await self.sync()
        except _UNREACHABLE_OR_STUCK:  # it was appended: the copy catches up when it can
            log.warning("appended to the shared log, but the copy could not follow it yet", exc_info=True)
        if checkpoint is not None:  # a consumer's position: this process's own
            await self._writer.transaction(self._appender.write, [], checkpoint)
        self.appends_total += 1
        return records

    def _try(self, db: sqlite3.Connection, prepared: list[PreparedBatch]) -> None:
        records = self._appender.write(db, prepared, None)
        raise _TriedOnly(_pinned(prepared, records))  # passed: roll the copy back, the shared log decides

    async def claim_lease(
        self, name: str, holder: str, ttl_s: float, *, on_new_leader: AppendBatch | None = None,
        now: float | None = None,
    ) -> bool:
        """PostgreSQL's lease, on the database's clock (``now`` is not used: every host
        must judge by one clock)."""
        async with self._reaching("the lease was not taken or renewed"):
            held = await self.shared_log.claim_lease(name, holder, ttl_s, on_new_leader=on_new_leader)
            if held and on_new_leader is not None:
                await self.sync()
        return held

    async def release_lease(self, name: str, holder: str) -> None:
        async with self._reaching("the lease runs out by itself"):
            await self.shared_log.release_lease(name, holder)

    @contextlib.asynccontextmanager
    async def _reaching(self, consequence: str) -> AsyncIterator[None]:
        """Turn the driver's connection failures into ``LogUnreachable``, saying what
        they mean for the caller."""
        try:
            yield
        except _UNREACHABLE as exc:
            raise LogUnreachable(f"the shared event log did not answer ({type(exc).__name__}: {exc}); "
                                 f"{consequence}") from exc

    # ------------------------------------------------------------------ copying
    async def catch_up(self) -> bool:
        before = await self.head_position()
        try:
            return await self.sync() > before
        except _UNREACHABLE:  # the copy is what there is: reads go on from it
            return False

    async def sync(self) -> int:
        """Copy what the local copy lacks of the shared log, with its read models; wake
        this process's subscribers if anything came. Returns the copy's head."""
        assert self._copy_lock is not None
        async with self._copy_lock:
            head = await self.head_position()
            copied = False
            while rows := await self.shared_log.rows_after(head, _PAGE):
                head, added = await self._writer.transaction(self._copy, rows)
                copied = copied or added
            if copied:
                self._notify()
            return head

    async def _bulk_copy(self) -> None:
        head = await self.head_position()
        if await self.shared_log.head_position() - head < BULK_COPY:
            return
        await self._writer.long_transaction(self._copy_all, await _rows_after(self.shared_log, head))

    def _copy_all(self, db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
        # One transaction: a crash leaves the copy as it was, never rows without their read models.
        rows = _after_head(db, rows)
        if rows:
            db.executemany(_INSERT, rows)
            self.read_models.rebuild(db)

    def _copy(self, db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> tuple[int, bool]:
        """Copy ``rows`` with their read models; the copy's head, and whether any came."""
        rows = _after_head(db, rows)
        if not rows:
            return head_position(db), False
        db.executemany(_INSERT, rows)  # positions as the shared log gave them; the trigger checks they follow
        try:
            folded = [decode_row(r) for r in rows if self.read_models.folds(str(r[3]))]
            if folded:
                self.read_models.apply(db, folded)
        except (InvariantViolation, EventDecodeError, UnknownEventType) as exc:
            # Every event was judged by a copy's read models before PostgreSQL took it: one
            # that this copy cannot take was judged by other code.
            first = int(rows[0][0])  # type: ignore[call-overload]
            raise CopyCannotFollow(
                f"{self.path} cannot take positions {first}..{rows[-1][0]} of the shared log: {exc}. "
                "Every host on one log must run the same Argus version: upgrade this one. Reads go on "
                f"from the copy as of position {first - 1}; writes here are refused, nothing written") from exc
        return int(rows[-1][0]), True  # type: ignore[call-overload]

    async def _follow(self) -> None:
        """Copy every append as PostgreSQL notifies it, until closed."""
        said = ""  # the last failure logged: a lasting one is logged once, not every few seconds
        while not self._closing:
            try:
                async with self.shared_log.listening() as woken:
                    self._wake = woken
                    while not self._closing:
                        woken.clear()  # before copying: a notification meanwhile is not lost
                        await self.sync()
                        said = ""
                        await self._wait(woken)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: try again, the copy keeps serving reads
                if str(exc) != said:
                    said = str(exc)
                    log.exception("following the shared log failed; retrying every %.0f s", self.poll_interval)
                self._wake = asyncio.Event()
                await self._wait(self._wake)

    async def _wait(self, event: asyncio.Event) -> None:
        if not self._closing:
            try:
                await asyncio.wait_for(event.wait(), self.poll_interval)
            except asyncio.TimeoutError:
                pass

    async def _check_copy(self, url: str) -> None:
        head = await self.head_position()
        if head == 0:
            return
        local = (await self.read(head - 1, 1))[0]
        shared = await self.shared_log.read(head - 1, 1)
        same = bool(shared) and (shared[0].stream, shared[0].version, shared[0].type) == (
            local.stream, local.version, local.type)
        if not same:
            raise NotACopy(f"{self.path} holds events the log at {redact_url(url)} does not (position {head}): "
                           "it is not a copy of that log (another log's, or written without it since). Move it "
                           "away; the copy is made again from the shared log")

