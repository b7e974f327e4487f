"""Inserting many rows at once: ``BatchInsert``, an ``executemany`` that SQLite runs faster.

``executemany`` steps one single-row statement per row. One statement of 32 rows
(``INSERT … VALUES (…), (…), …``) does the same work with about 0.7 µs less per row for
the event log's rows (measured: 2.9 against 3.6 µs per event at synchronous=OFF).
Preparing a statement costs about 4.5 µs per row, though, more than a batch saves, so a
statement is never built for the batch at hand: rows go through statements of a few fixed
sizes, each prepared once and then kept in the connection's statement cache, and the last
few rows through ``executemany``.

Used for the event log only. The projections' upserts (a dozen rows per append) gained
nothing measurable, and a rebuild's bulk inserts were slower than ``executemany`` fed by
a generator (which never holds the rows).
"""

from __future__ import annotations

import sqlite3
from itertools import chain
from typing import Sequence

__all__ = ["BatchInsert"]

# Rows per statement, largest first: 32 rows of the log's 9 columns are 288 parameters, far
# under SQLite's bound of 32,766.
BLOCK_SIZES = (32, 8)


class BatchInsert:
    """``INSERT INTO table (columns) VALUES …`` plus ``tail`` (an ``ON CONFLICT`` clause,
    say), for any number of rows."""

    def __init__(self, table: str, columns: str, tail: str = "") -> None:
        width = len(columns.split(","))
        row = f"({','.join('?' * width)})"
        head = f"INSERT INTO {table} ({columns}) VALUES "
        tail = f" {tail}" if tail else ""
        self.sql = f"{head}{row}{tail}"  # the single-row statement
        self._blocks = [(n, f"{head}{','.join([row] * n)}{tail}") for n in BLOCK_SIZES]

    def run(self, db: sqlite3.Connection, rows: Sequence[Sequence[object]]) -> None:
        """Insert ``rows`` (each a sequence of the columns' values), in order."""
        done, total = 0, len(rows)
        for size, sql in self._blocks:
            while total - done >= size:
                db.execute(sql, list(chain.from_iterable(rows[done:done + size])))
                done += size
        if done < total:
            db.executemany(self.sql, rows[done:])
