"""Rebuilding projections from the log, and the state that says how current each one is.

``projection_state`` holds, per projection, the code version its tables were built with,
the log position they reflect, and whether every append keeps them (``live``).
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.store.log import head_position
from projections.base import EntityProjection, FoldPlan
from projections.fold import fold_log

__all__ = [
    "ProjectionState", "projection_checkpoint", "projection_states", "rebuild_projections",
    "write_projection_state",
]


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
    (``projections.parallel``); the result is the same. Returns the last position."""
    last = head_position(source, until)
    plan = FoldPlan(projections)
    done = False
    if parallel:
        from projections.parallel import rebuild_in_parallel  # spawns processes: only when used

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


class ProjectionState(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``projection_state``: the code version a projection's tables were built
    with, the position they reflect, and whether every append keeps them (``live``)."""

    name: str
    version: int
    checkpoint: int
    live: bool


def projection_states(db: sqlite3.Connection) -> list[ProjectionState]:
    """Every projection's state, by name ([]: no ``projection_state`` table). Reads
    databases from before migration 0005 too (no ``live`` column: not live)."""
    columns = {name for _, name, *_ in db.execute("PRAGMA table_info(projection_state)")}
    if not columns:
        return []
    live = "live" if "live" in columns else "0"
    rows = db.execute(f"SELECT name, version, checkpoint, {live} FROM projection_state ORDER BY name")
    return [ProjectionState(name=n, version=v, checkpoint=c, live=bool(lv)) for n, v, c, lv in rows]
