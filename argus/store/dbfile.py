"""The database file as a whole, read-only: open it without writing to it, say what it
is, and make throw-away databases with this code's schema (replay folds into those).

A WAL database opened read-only (``mode=ro``) still needs its ``-shm`` file (SQLite makes
it next to the database when missing); where that is impossible (a read-only directory, a
copy without its ``-shm``) ``open_read_only`` copies the database and its ``-wal`` to a
temporary directory and reads there, and says so.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence
from urllib.parse import quote

import msgspec

from argus.store.integrity import digest_row
from argus.store.log import EVENT_COLUMNS
from argus.store.migrate import available_migrations, migrate

__all__ = [
    "DatabaseFacts", "LoadedLog", "NotEmpty", "database_facts", "event_recorded_at", "load_log", "open_read_only",
    "position_at_time", "read_transaction", "scratch_database",
]


class DatabaseFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What a database file holds, for ``argus db status`` and replay's checks (the
    projections' state is theirs to read: ``projections.rebuild.projection_states``)."""

    has_event_log: bool
    schema_version: int  # 0: no migrations recorded
    newest_known_version: int  # the newest migration this code ships
    journal_mode: str
    events: int = 0
    head: int = 0
    consumers: dict[str, int] = {}


def _connect_ro(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout)
    try:
        # The first read is what touches the -shm of a WAL database; fail here, not later.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def open_read_only(path: Path, *, copy_fallback: bool = True,
                   timeout: float = 5.0) -> Iterator[tuple[sqlite3.Connection, bool]]:
    """A read-only connection on ``path`` and whether it reads a temporary copy (never
    without ``copy_fallback``: then a refusal is raised). ``timeout``: how long a read
    waits on a lock (seconds)."""
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        try:
            conn = _connect_ro(path, timeout)
            copied = False
        except sqlite3.OperationalError:
            if not copy_fallback:
                raise
            tmp = tempfile.TemporaryDirectory(prefix="argus-replay-")
            copy = Path(tmp.name) / path.name
            shutil.copy2(path, copy)
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                shutil.copy2(wal, copy.with_name(copy.name + "-wal"))
            conn = _connect_ro(copy, timeout)
            copied = True
        try:
            yield conn, copied
        finally:
            conn.close()
    finally:
        if tmp is not None:
            tmp.cleanup()


def database_facts(conn: sqlite3.Connection, *, counts: bool = False) -> DatabaseFacts:
    """Whether the database holds an event log, its schema version, and (``counts``) how
    many events, the head and each consumer's checkpoint."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    version = 0
    if "schema_migrations" in tables:
        version = int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])
    facts = DatabaseFacts(
        has_event_log="events" in tables, schema_version=version,
        newest_known_version=available_migrations()[-1].version,
        journal_mode=str(conn.execute("PRAGMA journal_mode").fetchone()[0]),
    )
    if not counts or "events" not in tables:
        return facts
    count, head = conn.execute("SELECT count(*), coalesce(max(position), 0) FROM events").fetchone()
    consumers: dict[str, int] = {}
    if "subscriber_checkpoints" in tables:
        consumers = dict(conn.execute("SELECT name, position FROM subscriber_checkpoints ORDER BY name"))
    return msgspec.structs.replace(facts, events=int(count), head=int(head), consumers=consumers)


@contextlib.contextmanager
def scratch_database() -> Iterator[sqlite3.Connection]:
    """A throw-away database with this code's schema, deleted on exit."""
    with tempfile.TemporaryDirectory(prefix="argus-scratch-") as tmp:
        path = Path(tmp) / "scratch.sqlite3"
        migrate(path)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            # Nothing here needs to survive a crash: skip the journal and the fsyncs.
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute("PRAGMA cache_size=-65536")
            yield conn
        finally:
            conn.close()


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One snapshot for every read inside (a deferred transaction, ended on exit)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def position_at_time(conn: sqlite3.Connection, when: float) -> int:
    """The last position recorded at or before ``when`` (0 if none)."""
    row = conn.execute("SELECT coalesce(max(position), 0) FROM events WHERE recorded_at <= ?", (when,)).fetchone()
    return int(row[0])


def event_recorded_at(conn: sqlite3.Connection, position: int) -> float | None:
    """When the event at ``position`` was recorded (None: no such event)."""
    row = conn.execute("SELECT recorded_at FROM events WHERE position = ?", (position,)).fetchone()
    return float(row[0]) if row else None


class NotEmpty(ValueError):
    """A log is loaded only into an empty database; this table has rows."""


class LoadedLog(msgspec.Struct, frozen=True, kw_only=True):
    events: int
    first_position: int
    last_position: int


def load_log(db_path: str | Path, rows: Iterable[Sequence[object]], *, empty: Sequence[str],
             then: Callable[[sqlite3.Connection, LoadedLog], None]) -> LoadedLog:
    """Insert event rows (``EVENT_COLUMNS``, positions kept) into the database at
    ``db_path`` (created if missing), whose ``empty`` tables must hold nothing; run
    ``then`` in the same transaction (a rebuild). All or nothing."""
    migrate(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in ("events", *empty):
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
                    raise NotEmpty(f"{db_path} is not empty ({table} has rows); import only into an empty database")
            # Sealed as an append seals them (argus.store.integrity): the import is their writer.
            conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}, digest) VALUES (?,?,?,?,?,?,?,?,?,?)",
                             ((*row, digest_row(row)) for row in rows))
            first, last, n = conn.execute(
                "SELECT coalesce(min(position), 0), coalesce(max(position), 0), count(*) FROM events").fetchone()
            loaded = LoadedLog(events=int(n), first_position=int(first), last_position=int(last))
            then(conn, loaded)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return loaded
