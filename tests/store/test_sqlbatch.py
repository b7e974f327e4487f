"""BatchInsert: any number of rows, through fixed-size multi-row statements, equals
executemany row by row (same rows, same order, same conflict handling)."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.store.sqlbatch import BLOCK_SIZES, BatchInsert


def fresh() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0)")
    return db


@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 31, 32, 33, 40, 100, 1000])
def test_inserts_every_row_in_order(count: int) -> None:
    db = fresh()
    rows = [(k, f"v{k}") for k in range(count)]
    BatchInsert("t", "k, v").run(db, rows)
    assert db.execute("SELECT k, v FROM t ORDER BY rowid").fetchall() == rows


@given(st.lists(st.tuples(st.integers(0, 40), st.text(max_size=3)), max_size=80))
@settings(max_examples=60, deadline=None)
def test_an_upsert_equals_executemany_row_by_row(rows: list[tuple[int, str]]) -> None:
    """Keys repeat within a batch: each row's conflict sees the rows before it."""
    tail = "ON CONFLICT (k) DO UPDATE SET v = excluded.v, n = n + 1"
    batched, one_by_one = fresh(), fresh()
    statement = BatchInsert("t", "k, v", tail)
    statement.run(batched, rows)
    one_by_one.executemany(statement.sql, rows)
    assert batched.execute("SELECT * FROM t ORDER BY k").fetchall() == one_by_one.execute(
        "SELECT * FROM t ORDER BY k"
    ).fetchall()


def test_a_failing_row_fails_the_statement_it_is_in() -> None:
    db = fresh()
    rows = [(k, f"v{k}") for k in range(BLOCK_SIZES[0])]
    rows[5] = (5, None)  # type: ignore[assignment]  # NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        BatchInsert("t", "k, v").run(db, rows)
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 0
