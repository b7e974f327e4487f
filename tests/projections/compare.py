"""Compare the projection tables of a database with a rebuild of its log from scratch."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from argus.store import migrate
from projections import rebuild_projections
from projections import PROJECTION_TABLES, default_projections


def projection_tables() -> list[str]:
    return list(PROJECTION_TABLES)


def dump_table(db: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    """Every row of ``table`` ordered by its primary key."""
    pk = sorted((r[5], r[1]) for r in db.execute(f"PRAGMA table_info({table})") if r[5])
    order = ", ".join(name for _, name in pk) or "rowid"
    return [tuple(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY {order}")]


def dump_projections(db: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    return {table: dump_table(db, table) for table in projection_tables()}


def rebuilt_from_scratch(source_path: str | Path, scratch_path: str | Path) -> dict[str, list[tuple[object, ...]]]:
    """Fold the log of ``source_path`` into a fresh database at ``scratch_path``; dump it."""
    migrate(scratch_path)
    source = sqlite3.connect(source_path, isolation_level=None)
    target = sqlite3.connect(scratch_path, isolation_level=None)
    try:
        target.execute("BEGIN IMMEDIATE")
        rebuild_projections(source, target, default_projections())
        target.execute("COMMIT")
        return dump_projections(target)
    finally:
        source.close()
        target.close()


def inline_tables(path: str | Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        return dump_projections(db)
    finally:
        db.close()


def assert_projections_match_rebuild(path: str | Path, scratch_path: str | Path) -> None:
    """The tables kept inline by appends equal a rebuild of the same log, table by table."""
    inline = inline_tables(path)
    rebuilt = rebuilt_from_scratch(path, scratch_path)
    for table in projection_tables():
        assert inline[table] == rebuilt[table], f"projection table {table} differs from a rebuild"
