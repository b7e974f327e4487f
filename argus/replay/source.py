"""Opening a log for inspection (read-only), and naming a point in it.

Replay never writes to the database it inspects: ``argus.store.open_read_only``
opens it with ``mode=ro``, or reads a temporary copy where that is impossible
(``LogSource.copied`` says so). Replay folds into throw-away databases (``scratch_db``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Iterator

from argus.store import database_facts, head_position, open_read_only, position_at_time, scratch_database

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


@contextlib.contextmanager
def open_log(db_path: str | Path) -> Iterator[LogSource]:
    """Open ``db_path`` read-only (falling back to a temporary copy of it); ReplayError
    for a file that is not an Argus database or is newer than this code."""
    if is_postgres_url(str(db_path)):
        raise ReplayError("this command reads a SQLite file, and the log on PostgreSQL is read only by "
                          "export: point --db at a host's copy (its v2.sqlite.db_path; .argus/argus.sqlite3 "
                          "under argus up), or run argus replay --db <url> export -o log.jsonl and import "
                          "that into a new SQLite file")
    path = Path(db_path)
    if not path.is_file():
        raise ReplayError(f"no database at {path}")
    with open_read_only(path) as (conn, copied):
        facts = database_facts(conn)
        if not facts.has_event_log:
            raise ReplayError(f"{path} is not an Argus database (it has no events table)")
        if facts.schema_version > facts.newest_known_version:
            raise ReplayError(
                f"{path} is at schema version {facts.schema_version}, newer than this Argus "
                f"({facts.newest_known_version}); replay it with the Argus that wrote it"
            )
        yield LogSource(conn, path, copied)


scratch_db = scratch_database


def is_postgres_url(where: str) -> bool:
    """A database named by a PostgreSQL URL (``postgresql://…``), not a SQLite file."""
    return where.startswith(("postgresql://", "postgres://"))


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
