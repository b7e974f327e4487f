"""``verify``: rebuild every projection from the log and compare it with the live tables.

The rebuild is ``projections.rebuild_projections`` — the fold the store runs on start —
into a scratch database. Events and live tables are read inside one read transaction, so a
log that is being appended to is compared at one consistent position.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import msgspec

from argus.replay.source import head_position, open_log, scratch_db
from projections import PROJECTION_TABLES, default_projections, rebuild_projections

__all__ = ["RowDiff", "VerifyReport", "compare_tables", "verify"]


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


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    position: int  # the log position compared at
    rows_compared: dict[str, int]  # table -> rows on the live side
    diffs: list[RowDiff]
    diffs_truncated: bool = False  # more differences existed than were kept
    copied: bool = False  # read from a temporary copy of the database
    events_per_s: float = 0.0
    seconds: float = 0.0

    def render(self) -> str:
        lines = [d.render() for d in self.diffs]
        if self.diffs_truncated:
            lines.append("… more differences not shown")
        total = sum(self.rows_compared.values())
        verdict = "OK: projections equal the log" if self.ok else f"DIFFERENT: {len(self.diffs)} row(s)"
        lines.append(
            f"{verdict} (position {self.position}, {total} rows in {len(self.rows_compared)} "
            f"tables, {self.seconds:.2f} s, {self.events_per_s:,.0f} events/s)"
        )
        return "\n".join(lines)


def _short(row: dict[str, Any] | None, width: int) -> str:
    if row is None:
        return "<missing>"
    text = repr(row)
    return text if len(text) <= width else text[: width - 1] + "…"


def verify(db_path: str | Path, *, max_diffs: int = 100) -> VerifyReport:
    """Rebuild every projection of ``db_path`` from its log and compare it with the live
    tables, row by row. ``report.ok`` is False when any row differs."""
    started = time.perf_counter()
    with open_log(db_path) as source, scratch_db() as scratch:
        live = source.conn
        # The rebuild is readable from the live connection too, so that equal tables are
        # recognised inside SQLite (a join on the key) and only differing ones are walked
        # row by row in Python. ATTACH must come before the read transaction.
        (scratch_path,) = [p for _, name, p in scratch.execute("PRAGMA database_list") if name == "main"]
        live.execute("ATTACH DATABASE ? AS rebuilt", (f"file:{quote(scratch_path)}?mode=ro",))
        live.execute("BEGIN")  # one snapshot for the events and the live tables
        try:
            head = head_position(live)
            scratch.execute("BEGIN")
            rebuild_projections(live, scratch, default_projections(), until=head)
            scratch.execute("COMMIT")
            counts, diffs, truncated = compare_tables(live, scratch, max_diffs=max_diffs, attached="rebuilt")
        finally:
            live.execute("COMMIT")
            live.execute("DETACH DATABASE rebuilt")
        seconds = time.perf_counter() - started
        return VerifyReport(
            ok=not diffs, position=head, rows_compared=counts, diffs=diffs,
            diffs_truncated=truncated, copied=source.copied, seconds=seconds,
            events_per_s=head / seconds if seconds > 0 else 0.0,
        )


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
    diffs: list[RowDiff] = []
    dropped = False

    def add(diff: RowDiff) -> None:
        nonlocal dropped
        if len(diffs) < max_diffs:
            diffs.append(diff)
        else:
            dropped = True

    for table in tables:
        columns, pk = _primary_key(rebuilt, table)
        live_columns, _ = _primary_key(live, table)
        if live_columns != columns:
            add(RowDiff(table=table, key=["<columns>"], live={"columns": live_columns},
                        rebuilt={"columns": columns}))
            continue
        if attached is not None:
            equal_rows = _equal_in_sqlite(live, attached, table, columns, pk)
            if equal_rows is not None:
                counts[table] = equal_rows
                continue
        key_idx = [columns.index(c) for c in pk]
        n = 0
        left, right = _rows(live, table, columns, pk), _rows(rebuilt, table, columns, pk)
        a, b = next(left, None), next(right, None)
        while a is not None or b is not None:
            ka = [a[i] for i in key_idx] if a is not None else None
            kb = [b[i] for i in key_idx] if b is not None else None
            if a is not None and (b is None or _key_lt(ka, kb)):  # type: ignore[arg-type]
                add(RowDiff(table=table, key=ka, live=_cells(columns, a), rebuilt=None))  # type: ignore[arg-type]
                n += 1
                a = next(left, None)
            elif b is not None and (a is None or _key_lt(kb, ka)):  # type: ignore[arg-type]
                add(RowDiff(table=table, key=kb, live=None, rebuilt=_cells(columns, b)))  # type: ignore[arg-type]
                b = next(right, None)
            else:
                assert a is not None and b is not None
                if a != b:
                    changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
                    add(RowDiff(
                        table=table, key=ka,  # type: ignore[arg-type]
                        live=_cells(columns, a, changed),
                        rebuilt=_cells(columns, b, changed),
                    ))
                n += 1
                a, b = next(left, None), next(right, None)
        counts[table] = n
    return counts, diffs, dropped


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
