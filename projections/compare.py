"""Comparing projection tables between two databases, row by row (``argus replay verify``:
the live tables against a rebuild from the log)."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Iterator
from urllib.parse import quote

import msgspec

from projections.registry import PROJECTION_TABLES

__all__ = ["RowDiff", "attached", "compare_tables"]


class RowDiff(msgspec.Struct, frozen=True, kw_only=True):
    """One row that differs. ``live``/``rebuilt`` hold the differing columns only (all
    columns when the row is missing on one side: that side is None)."""

    table: str
    key: list[Any]
    live: dict[str, Any] | None
    rebuilt: dict[str, Any] | None

    def render(self, width: int = 160) -> str:
        key = self.key[0] if len(self.key) == 1 else tuple(self.key)
        return f"{self.table} {key}: live={_short(self.live, width)} rebuilt={_short(self.rebuilt, width)}"


def _short(row: dict[str, Any] | None, width: int) -> str:
    if row is None:
        return "<missing>"
    text = repr(row)
    return text if len(text) <= width else text[: width - 1] + "…"


@contextlib.contextmanager
def attached(conn: sqlite3.Connection, other: sqlite3.Connection, *, as_name: str) -> Iterator[None]:
    """``other``'s database readable from ``conn`` as ``as_name`` (read-only), detached on
    exit. Attach outside a transaction: SQLite refuses it inside one."""
    (path,) = [p for _, name, p in other.execute("PRAGMA database_list") if name == "main"]
    conn.execute(f"ATTACH DATABASE ? AS {as_name}", (f"file:{quote(path)}?mode=ro",))
    try:
        yield
    finally:
        conn.execute(f"DETACH DATABASE {as_name}")


def _equal_in_sqlite(live: sqlite3.Connection, attached: str, table: str, columns: list[str], pk: list[str]) -> int | None:
    """The table's row count when it is identical in ``main`` and ``attached`` (every row
    matched on its key with every column equal, NULLs included); None when it is not."""
    on = " AND ".join(f"a.{c} = b.{c}" for c in pk)
    same = " AND ".join(f"a.{c} IS b.{c}" for c in columns)
    n_live = live.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
    n_rebuilt = live.execute(f"SELECT count(*) FROM {attached}.{table}").fetchone()[0]
    if n_live != n_rebuilt:
        return None
    matched = live.execute(
        f"SELECT count(*) FROM main.{table} AS a JOIN {attached}.{table} AS b ON {on} WHERE {same}"
    ).fetchone()[0]
    return n_live if matched == n_live else None


def _primary_key(conn: sqlite3.Connection, table: str) -> tuple[list[str], list[str]]:
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    columns = [r[1] for r in info]
    pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
    return columns, pk or columns


def _rows(conn: sqlite3.Connection, table: str, columns: list[str], pk: list[str]) -> Iterator[tuple[Any, ...]]:
    cols = ", ".join(columns)
    yield from conn.execute(f"SELECT {cols} FROM {table} ORDER BY {', '.join(pk)}")


def compare_tables(
    live: sqlite3.Connection,
    rebuilt: sqlite3.Connection,
    *,
    tables: tuple[str, ...] = PROJECTION_TABLES,
    max_diffs: int = 100,
    attached: str | None = None,
) -> tuple[dict[str, int], list[RowDiff], bool]:
    """Merge-walk each table of both databases in primary-key order (memory stays flat).
    With ``attached`` (the name under which ``rebuilt`` is attached to ``live``), tables
    found equal by SQLite itself are not walked. Returns (rows per table on the live side,
    differences, whether some were dropped)."""
    counts: dict[str, int] = {}
    found = _Diffs(max_diffs)
    for table in tables:
        columns, pk = _primary_key(rebuilt, table)
        live_columns, _ = _primary_key(live, table)
        if live_columns != columns:
            found.add(RowDiff(table=table, key=["<columns>"], live={"columns": live_columns},
                              rebuilt={"columns": columns}))
            continue
        if attached is not None:
            equal_rows = _equal_in_sqlite(live, attached, table, columns, pk)
            if equal_rows is not None:
                counts[table] = equal_rows
                continue
        counts[table] = _walk(live, rebuilt, table, columns, pk, found)
    return counts, found.diffs, found.dropped


class _Diffs:
    """The differences found, the first ``max_diffs`` of them kept."""

    def __init__(self, max_diffs: int) -> None:
        self.max_diffs = max_diffs
        self.diffs: list[RowDiff] = []
        self.dropped = False

    def add(self, diff: RowDiff) -> None:
        if len(self.diffs) < self.max_diffs:
            self.diffs.append(diff)
        else:
            self.dropped = True


def _walk(live: sqlite3.Connection, rebuilt: sqlite3.Connection, table: str, columns: list[str], pk: list[str],
          found: _Diffs) -> int:
    """Merge-walk one table of both databases in primary-key order; its rows on the live side."""
    key_idx = [columns.index(c) for c in pk]
    n = 0
    left, right = _rows(live, table, columns, pk), _rows(rebuilt, table, columns, pk)
    a, b = next(left, None), next(right, None)
    while a is not None or b is not None:
        ka = [a[i] for i in key_idx] if a is not None else None
        kb = [b[i] for i in key_idx] if b is not None else None
        if a is not None and (b is None or _key_lt(ka, kb)):  # type: ignore[arg-type]
            found.add(RowDiff(table=table, key=ka, live=_cells(columns, a), rebuilt=None))  # type: ignore[arg-type]
            n += 1
            a = next(left, None)
        elif b is not None and (a is None or _key_lt(kb, ka)):  # type: ignore[arg-type]
            found.add(RowDiff(table=table, key=kb, live=None, rebuilt=_cells(columns, b)))  # type: ignore[arg-type]
            b = next(right, None)
        else:
            assert a is not None and b is not None
            if a != b:
                changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
                found.add(RowDiff(
                    table=table, key=ka,  # type: ignore[arg-type]
                    live=_cells(columns, a, changed),
                    rebuilt=_cells(columns, b, changed),
                ))
            n += 1
            a, b = next(left, None), next(right, None)
    return n


def _cells(columns: list[str], row: tuple[Any, ...], only: list[int] | None = None) -> dict[str, Any]:
    # BLOB cells here are JSON text (tasks.view): show them as text, not base64.
    idx = range(len(columns)) if only is None else only
    return {
        columns[i]: row[i].decode("utf-8", "replace") if isinstance(row[i], bytes) else row[i]
        for i in idx
    }


def _key_lt(x: list[Any], y: list[Any]) -> bool:
    # Python's order matches SQLite's for the TEXT/INTEGER keys these tables use.
    return x < y
