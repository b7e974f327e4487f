"""Reading log rows back as ``Recorded`` and folding them into projections (sync sqlite3).

Used by the store (inline projections, rebuild on start) and by the replay tool (verify,
time travel), so that there is one decode path and one fold.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, Iterable, Iterator, Sequence

import msgspec

from argus.events import EventBase, EventMeta, Recorded, decode_event
from argus.events.codec import decode_failure, decoder_for
from projections import EntityProjection, FoldPlan, Rebuild

__all__ = [
    "EVENT_COLUMNS",
    "Share",
    "decode_row",
    "fold_log",
    "fold_rows",
    "iter_log",
    "log_rows",
    "projection_checkpoint",
    "rebuild_projections",
    "write_projection_state",
]

EVENT_COLUMNS = "position, stream, version, type, schema_version, data, meta, owner, recorded_at"
# The same columns with meta left out (NULL): folds never read who caused an event.
_FOLD_COLUMNS = "position, stream, version, type, schema_version, data, NULL, owner, recorded_at"

_decode_meta = msgspec.json.Decoder(EventMeta).decode
_EMPTY_META = EventMeta()


def decode_row(row: Sequence[object]) -> Recorded:
    position, stream, version, type_, schema, data, meta, owner, recorded_at = row
    return Recorded(
        position=position,  # type: ignore[arg-type]
        stream=stream,  # type: ignore[arg-type]
        version=version,  # type: ignore[arg-type]
        type=type_,  # type: ignore[arg-type]
        event=decode_event(type_, schema, data),  # type: ignore[arg-type]
        meta=_decode_meta(meta) if meta != b"{}" else _EMPTY_META,  # type: ignore[arg-type]
        owner=owner,  # type: ignore[arg-type]
        recorded_at=recorded_at,  # type: ignore[arg-type]
    )


class _Decoders(dict[tuple[str, int], Callable[[bytes], EventBase]]):
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
        sql, params = "", []
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
    decoders = _Decoders()
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
                meta=_EMPTY_META if meta == b"{}" else _decode_meta(meta),
                owner=owner, recorded_at=recorded_at,
            )
    except msgspec.DecodeError as exc:
        raise decode_failure(type_, schema, exc, position) from exc


def fold_log(
    source: sqlite3.Connection, plan: FoldPlan, *, until: int | None = None, share: Share | None = None
) -> Rebuild:
    """Fold the log of ``source`` (up to ``until``; only ``share`` of its streams if given)
    in memory."""
    return fold_rows(log_rows(source, 0, until, meta=False, share=share), plan)


def fold_rows(rows: Iterable[Sequence[Any]], plan: FoldPlan) -> Rebuild:
    """Fold log rows (``EVENT_COLUMNS``, in log order; meta is not read) into fresh
    entities. One pass decodes each event once and folds it once per fold, however many
    projections that fold feeds."""
    rebuild = Rebuild(plan)
    # The fold and the row decoding inlined, with bound methods looked up once per type: this
    # loop runs once per event of a log of millions, and its overheads were most of its time.
    folds = {
        t: tuple((fold.key, fold.evolve, rebuild.entities[fold]) for fold in fs)
        for t, fs in plan.by_type.items()
    }
    decoders = _Decoders()
    position, type_, schema = 0, "", 0
    try:
        for position, stream, version, type_, schema, data, _, owner, recorded_at in rows:
            fs = folds.get(type_)
            if fs is None:
                continue
            rec = Recorded(
                position=position, stream=stream, version=version, type=type_,
                event=decoders[type_, schema](data), meta=_EMPTY_META, owner=owner,
                recorded_at=recorded_at,
            )
            for key_of, evolve, entities in fs:
                key = key_of(rec)
                entity = evolve(entities.get(key), rec)
                if entity is None:
                    entities.pop(key, None)
                else:
                    entities[key] = entity
    except msgspec.DecodeError as exc:
        raise decode_failure(type_, schema, exc, position) from exc
    return rebuild


def rebuild_projections(
    source: sqlite3.Connection,
    target: sqlite3.Connection,
    projections: Sequence[EntityProjection],  # type: ignore[type-arg]
    *,
    until: int | None = None,
    parallel: bool = True,
) -> int:
    """Fold the log of ``source`` (up to ``until``) into fresh ``projections`` and write
    them into ``target`` (which may be the same connection, inside a transaction the caller
    holds). A long log is folded by several processes when the machine has the cores
    (``argus.store.parallel``); the result is the same. Returns the last position."""
    row = source.execute(
        "SELECT coalesce(max(position), 0) FROM events" + (" WHERE position <= ?" if until is not None else ""),
        (until,) if until is not None else (),
    ).fetchone()
    last = int(row[0])
    plan = FoldPlan(projections)
    done = False
    if parallel:
        from argus.store.parallel import rebuild_in_parallel  # spawns processes: only when used

        done = rebuild_in_parallel(source, target, plan, last)
    if not done:
        fold_log(source, plan, until=last).write(target)
    # Live (following every append from now on) only when rebuilt in place at the head.
    write_projection_state(target, projections, last, live=until is None and source is target)
    return last


def write_projection_state(
    db: sqlite3.Connection,
    projections: Sequence[EntityProjection],  # type: ignore[type-arg]
    checkpoint: int,
    *,
    live: bool,
) -> None:
    """Record that ``projections`` are exact at ``checkpoint`` (and, when ``live``, that
    every append from now on keeps them so)."""
    db.executemany(
        "INSERT INTO projection_state (name, version, checkpoint, live) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET version = excluded.version, "
        "checkpoint = excluded.checkpoint, live = excluded.live",
        [(p.name, p.version, checkpoint, int(live)) for p in projections],
    )


def projection_checkpoint(db: sqlite3.Connection, name: str) -> int:
    """The last log position projection ``name`` reflects: the head while it is live (its
    tables are written in every append's transaction), else where it was left (0: never
    built). Read it in the same read transaction as the tables it describes."""
    row = db.execute(
        "SELECT CASE WHEN live THEN (SELECT coalesce(max(position), 0) FROM events) ELSE checkpoint END "
        "FROM projection_state WHERE name = ?",
        (name,),
    ).fetchone()
    return int(row[0]) if row else 0
