"""Reading the log back (sync sqlite3): rows as ``Recorded``, streamed in order.

One decode path for everything that reads the log: the store's async reads, the
projections' folds and rebuilds (``projections.fold``), and the replay tool.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Iterable, Iterator, Sequence

import msgspec

from argus.events import EventBase, EventMeta, Recorded, decode_event
from argus.events.codec import EventDecodeError, decode_failure, decoder_for

__all__ = [
    "EVENT_COLUMNS", "Decoders", "EMPTY_META", "Share", "decode_row", "head_position", "iter_log", "log_rows",
    "read_stream",
]

EVENT_COLUMNS = "position, stream, version, type, schema_version, data, meta, owner, recorded_at"
# The same columns with meta left out (NULL): folds never read who caused an event.
_FOLD_COLUMNS = "position, stream, version, type, schema_version, data, NULL, owner, recorded_at"

_decode_meta = msgspec.json.Decoder(EventMeta).decode
EMPTY_META = EventMeta()


def decode_row(row: Sequence[object]) -> Recorded:
    """One row as ``Recorded``; EventDecodeError (naming the position) for a row that does
    not decode (a damaged log: argus.store.integrity)."""
    position, stream, version, type_, schema, data, meta, owner, recorded_at = row
    try:
        event = decode_event(type_, schema, data)  # type: ignore[arg-type]
        decoded_meta = _decode_meta(meta) if meta != b"{}" else EMPTY_META  # type: ignore[arg-type]
    except EventDecodeError as exc:
        raise EventDecodeError(f"event at position {position}: {exc}") from exc
    except msgspec.DecodeError as exc:  # the meta column
        raise EventDecodeError(f"event at position {position}: its meta does not decode: {exc}") from exc
    return Recorded(
        position=position,  # type: ignore[arg-type]
        stream=stream,  # type: ignore[arg-type]
        version=version,  # type: ignore[arg-type]
        type=type_,  # type: ignore[arg-type]
        event=event,
        meta=decoded_meta,
        owner=owner,  # type: ignore[arg-type]
        recorded_at=recorded_at,  # type: ignore[arg-type]
    )


class Decoders(dict[tuple[str, int], Callable[[bytes], EventBase]]):
    """``decoder_for``, kept per (type, schema) for one pass over the log."""

    def __missing__(self, key: tuple[str, int]) -> Callable[[bytes], EventBase]:
        decode = self[key] = decoder_for(*key)
        return decode


class Share(msgspec.Struct, frozen=True):
    """Some of the log's streams: those whose names sort from ``low`` (included) up to
    ``high`` (excluded); None is no bound. Every event of a stream falls in one share, in
    order, so each share can be folded on its own."""

    low: str | None = None
    high: str | None = None

    def sql(self) -> tuple[str, list[str]]:
        """The share's condition on a scan of ``events``, and its parameters. ``+stream``
        keeps SQLite on the scan in log order: with the (stream, version) index it would
        walk the share's streams and then sort a million rows back into order."""
        sql, params = "", list[str]()
        if self.low is not None:
            sql, params = sql + " AND +stream >= ?", [*params, self.low]
        if self.high is not None:
            sql, params = sql + " AND +stream < ?", [*params, self.high]
        return sql, params


def log_rows(
    db: sqlite3.Connection, after: int, until: int | None, meta: bool, share: Share | None = None
) -> sqlite3.Cursor:
    """One statement streaming the log's rows in order: memory stays flat however long the
    log is. Without ``meta`` its column is NULL (folds never read who caused an event)."""
    sql = f"SELECT {EVENT_COLUMNS if meta else _FOLD_COLUMNS} FROM events WHERE position > ?"
    params: list[int | str] = [after]
    if until is not None:
        sql += " AND position <= ?"
        params.append(until)
    if share is not None:
        condition, names = share.sql()
        sql += condition
        params.extend(names)
    return db.execute(sql + " ORDER BY position", params)


def iter_log(
    db: sqlite3.Connection,
    *,
    after: int = 0,
    until: int | None = None,
    types: Iterable[str] | None = None,
) -> Iterator[Recorded]:
    """Every event after ``after`` (up to ``until``), of ``types`` if given, in order.

    Types are filtered here, before decoding, rather than in SQL: an ``IN`` test in the
    query cost more per row than skipping a row in Python."""
    wanted = None if types is None else frozenset(types)
    decoders = Decoders()
    position, type_, schema = after, "", 0
    try:
        for position, stream, version, type_, schema, data, meta, owner, recorded_at in log_rows(
            db, after, until, meta=True
        ):
            if wanted is not None and type_ not in wanted:
                continue
            yield Recorded(
                position=position, stream=stream, version=version, type=type_,
                event=decoders[type_, schema](data),
                meta=EMPTY_META if meta == b"{}" else _decode_meta(meta),
                owner=owner, recorded_at=recorded_at,
            )
    except msgspec.DecodeError as exc:
        raise decode_failure(type_, schema, exc, position) from exc


def head_position(db: sqlite3.Connection, until: int | None = None) -> int:
    """The log's last position (0: empty), or the last at or before ``until``."""
    sql = "SELECT coalesce(max(position), 0) FROM events"
    row = db.execute(sql + " WHERE position <= ?", (until,)).fetchone() if until is not None else db.execute(sql).fetchone()
    return int(row[0])


def read_stream(db: sqlite3.Connection, stream: str) -> list[Recorded]:
    """Every event of one stream, in order."""
    rows = db.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE stream = ? ORDER BY version", (stream,))
    return [decode_row(r) for r in rows]
