"""Schema migrations: ``migrations/NNNN_name.sql`` applied in order and recorded.

Each file runs in its own transaction together with its row in ``schema_migrations``, so a
crash leaves the database at a whole version. A database whose version is newer than the
newest file this code ships is refused: old code must not write into a newer schema.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from importlib import resources
from pathlib import Path

import msgspec

from argus.store.space import full_disk_note

__all__ = ["Migration", "MigrationError", "available_migrations", "current_version", "migrate"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The database cannot be brought to this code's schema; the message says why."""


class Migration(msgspec.Struct, frozen=True):
    version: int
    name: str
    sql: str


def available_migrations(directory: Path | None = None) -> list[Migration]:
    """The migrations shipped with this code (or found in ``directory``), in order."""
    if directory is not None:
        files = [(p.name, p.read_text()) for p in Path(directory).iterdir()]
    else:
        root = resources.files("migrations")
        files = [(p.name, p.read_text()) for p in root.iterdir() if p.name.endswith(".sql")]
    found: list[Migration] = []
    for name, sql in files:
        match = _NAME.match(name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), sql))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(f"migration numbers must be 1, 2, 3, …; found {migration.version}")
    return found


def current_version(conn: sqlite3.Connection) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def migrate(
    db_path: str | Path, *, target: int | None = None, migrations: list[Migration] | None = None
) -> list[int]:
    """Apply every pending migration (up to ``target``); return the versions applied."""
    migrations = available_migrations() if migrations is None else migrations
    head = migrations[-1].version if migrations else 0
    target = head if target is None else target
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    try:
        _enable_wal(conn)
        current = current_version(conn)
        if current > head:
            raise MigrationError(
                f"database {db_path} is at schema version {current}, newer than this Argus "
                f"knows ({head}); upgrade Argus instead of running old code against it"
            )
        applied: list[int] = []
        for migration in migrations:
            if migration.version <= current or migration.version > target:
                continue
            # One transaction per file. The version is re-read under the write lock: another
            # process opening the same database at the same moment may have applied it.
            conn.execute("BEGIN IMMEDIATE")
            if current_version(conn) >= migration.version:
                conn.execute("COMMIT")
                continue
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
            conn.execute("COMMIT")
            applied.append(migration.version)
        return applied
    except sqlite3.Error as exc:
        if conn.in_transaction:  # SQLite may have rolled back already (a full disk)
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        note = full_disk_note(db_path)
        raise MigrationError(f"migration failed: {exc}" + (f": {note}" if note else "")) from exc
    finally:
        conn.close()


def _statements(sql: str) -> list[str]:
    """Split a migration file into whole statements (triggers' BEGIN … END included), so
    that they run inside a transaction we hold (``executescript`` would commit it)."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        not ln.strip() or ln.strip().startswith("--") for ln in buffer.splitlines()
    ):
        raise MigrationError(f"incomplete SQL statement at the end of a migration: {buffer!r}")
    return statements


def _enable_wal(conn: sqlite3.Connection, attempts: int = 50) -> None:
    """Switch to WAL. Changing the journal mode does not wait on SQLite's busy handler, so
    a process racing another one opening a fresh database retries here."""
    for attempt in range(attempts):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05)
