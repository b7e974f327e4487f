"""Reading log rows back as ``Recorded`` and folding them into projections (sync sqlite3).

Used by the store (inline projections, rebuild on start) and by the replay tool (verify,
time travel), so that there is one decode path and one fold.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable, Iterator, Sequence

import msgspec

from argus.events import EventMeta, Recorded, decode_event
from projections import EntityProjection, Rebuild

__all__ = [
    "EVENT_COLUMNS",
    "decode_row",
    "iter_log",
    "rebuild_projections",
    "write_projection_state",
]

EVENT_COLUMNS = "position, stream, version, type, schema_version, data, meta, owner, recorded_at"

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


def iter_log(
    db: sqlite3.Connection,
    *,
    after: int = 0,
    until: int | None = None,
    types: Iterable[str] | None = None,
    chunk: int = 20_000,
) -> Iterator[Recorded]:
    """Every event after ``after`` (up to ``until``), in order, read in chunks so memory
    stays flat however long the log is."""
    where = "position > ?"
    params: list[object] = []
    if until is not None:
        where += " AND position <= ?"
        params.append(until)
    if types is not None:
        names = sorted(set(types))
        # "+type": walk the log in position order and filter, rather than let SQLite pick
        # the (type, position) index and sort every remaining row for each chunk (quadratic
        # over a long log: a 1M-event rebuild spent most of its time there).
        where += f" AND +type IN ({','.join('?' * len(names))})"
        params.extend(names)
    sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} ORDER BY position LIMIT {chunk}"
    cursor = after
    while True:
        rows = db.execute(sql, (cursor, *params)).fetchall()
        if not rows:
            return
        for row in rows:
            yield decode_row(row)
        cursor = rows[-1][0]


def rebuild_projections(
    source: sqlite3.Connection,
    target: sqlite3.Connection,
    projections: Sequence[EntityProjection],  # type: ignore[type-arg]
    *,
    until: int | None = None,
) -> int:
    """Fold the log of ``source`` (up to ``until``) into fresh ``projections`` and write
    them into ``target`` (which may be the same connection, inside a transaction the caller
    holds). One pass over the log decodes each event once. Returns the last position."""
    rebuilds: list[Rebuild] = [p.rebuilder() for p in projections]  # type: ignore[type-arg]
    by_type: dict[str, list[Rebuild]] = {}  # type: ignore[type-arg]
    for rebuild in rebuilds:
        for type_ in rebuild.projection.handles:
            by_type.setdefault(type_, []).append(rebuild)
    # Rebuild.fold, inlined with its bound methods looked up once per type: this loop runs
    # once per (event, projection), and attribute lookups were a third of its time.
    folds = {
        t: tuple((r.projection.key, r.projection.evolve, r.entities) for r in rs)
        for t, rs in by_type.items()
    }
    for rec in iter_log(source, until=until, types=by_type):
        for key_of, evolve, entities in folds[rec.type]:
            key = key_of(rec)
            entity = evolve(entities.get(key), rec)
            if entity is None:
                entities.pop(key, None)
            else:
                entities[key] = entity
    row = source.execute(
        "SELECT coalesce(max(position), 0) FROM events" + (" WHERE position <= ?" if until is not None else ""),
        (until,) if until is not None else (),
    ).fetchone()
    last = int(row[0])
    for rebuild in rebuilds:
        rebuild.write(target)
    write_projection_state(target, projections, last)
    return last


def write_projection_state(
    db: sqlite3.Connection,
    projections: Sequence[EntityProjection],  # type: ignore[type-arg]
    checkpoint: int,
) -> None:
    db.executemany(
        "INSERT INTO projection_state (name, version, checkpoint) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET version = excluded.version, "
        "checkpoint = excluded.checkpoint",
        [(p.name, p.version, checkpoint) for p in projections],
    )
