"""Plain SQL against a store's database, for tests that look at a table's columns as
stored. The application reads through typed readers (``projections.*``, ``argus.store``);
tests/test_no_sql_outside.py keeps it so."""

from __future__ import annotations

from typing import Any, Sequence

from argus.store import EventStore


async def rows(store: EventStore, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects, read in one snapshot through the store's reader."""
    return await store.read_snapshot(lambda db: [tuple(r) for r in db.execute(sql, params)])
