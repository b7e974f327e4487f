"""Opening a log for inspection (read-only) and the scratch databases replay folds into.

Replay never writes to the database it inspects: it is opened with ``mode=ro``. A WAL
database opened read-only still needs its ``-shm`` file (SQLite creates it next to the
database when missing); where that is impossible (a read-only directory, a copy without
its ``-shm``) the database and its ``-wal`` are copied to a temporary directory and read
there, and ``LogSource.copied`` says so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

from argus.store.migrate import available_migrations, migrate

__all__ = [
    "LogSource",
    "ReplayError",
    "head_position",
    "open_log",
    "parse_time",
    "position_at_time",
    "resolve_point",
    "scratch_db",
]

# An integer at least this large given as POSITION|TIME is read as UNIX seconds: a log of
# 10^9 events is beyond this store's scale, and 10^9 s is 2001-09-09.
_UNIX_THRESHOLD = 1_000_000_000


class ReplayError(Exception):
    """The log cannot be inspected as asked; the message says why."""


class LogSource:
    """A read-only connection on a log (or on a temporary copy of it)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, copied: bool) -> None:
        self.conn = conn
        self.path = path
        self.copied = copied  # True: read from a temporary copy (the -shm could not be made)


def _connect_ro(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        # The first read is what touches the -shm of a WAL database; fail here, not later.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def open_log(db_path: str | Path) -> Iterator[LogSource]:
    """Open ``db_path`` read-only; fall back to reading a temporary copy of it."""
    path = Path(db_path)
    if not path.is_file():
        raise ReplayError(f"no database at {path}")
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        try:
            conn = _connect_ro(path)
            copied = False
        except sqlite3.OperationalError:
            tmp = tempfile.TemporaryDirectory(prefix="argus-replay-")
            copy = Path(tmp.name) / path.name
            shutil.copy2(path, copy)
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                shutil.copy2(wal, copy.with_name(copy.name + "-wal"))
            conn = _connect_ro(copy)
            copied = True
        try:
            _check_schema(conn, path)
            yield LogSource(conn, path, copied)
        finally:
            conn.close()
    finally:
        if tmp is not None:
            tmp.cleanup()


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "events" not in tables:
        raise ReplayError(f"{path} is not an Argus database (it has no events table)")
    if "schema_migrations" in tables:
        version = int(conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] or 0)
        head = available_migrations()[-1].version
        if version > head:
            raise ReplayError(
                f"{path} is at schema version {version}, newer than this Argus ({head}); "
                "replay it with the Argus that wrote it"
            )


@contextlib.contextmanager
def scratch_db() -> Iterator[sqlite3.Connection]:
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


def head_position(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])


def position_at_time(conn: sqlite3.Connection, when: float) -> int:
    """The last position recorded at or before ``when`` (0 if none)."""
    row = conn.execute(
        "SELECT coalesce(max(position), 0) FROM events WHERE recorded_at <= ?", (when,)
    ).fetchone()
    return int(row[0])


def parse_time(text: str) -> float:
    """ISO-8601 (naive means UTC) or UNIX seconds, as UNIX seconds."""
    text = text.strip()
    try:
        return float(text.lstrip("@"))
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReplayError(f"{text!r} is neither ISO-8601 nor UNIX seconds") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


def resolve_point(conn: sqlite3.Connection, point: str | int | float) -> int:
    """POSITION|TIME to a position. An int (or digits) below 10^9 is a position; ``@N``,
    a number with a fraction or ≥ 10^9, or ISO-8601 is a time."""
    head = head_position(conn)
    if isinstance(point, str):
        text = point.strip()
        if text.isdigit() and int(text) < _UNIX_THRESHOLD:
            point = int(text)
        else:
            return position_at_time(conn, parse_time(text))
    if isinstance(point, float) or point >= _UNIX_THRESHOLD:
        return position_at_time(conn, float(point))
    if point < 0 or point > head:
        raise ReplayError(f"position {point} is outside the log (1..{head})")
    return point
