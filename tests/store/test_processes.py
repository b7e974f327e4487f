"""The store shared by real OS processes: concurrent writers, a writer killed with SIGKILL
mid-storm, a subscriber following another process's appends, concurrent first opens."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from argus.events import task_stream
from argus.store import migrate
from projections import open_store
from tests.events import factories as f
from tests.projections.compare import assert_projections_match_rebuild
from tests.store.contract import positions_seen
from tests.store.procs import REPO_ROOT, child_command, child_env, kill_mid_storm


def spawn(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        child_command(*args), cwd=REPO_ROOT, env=child_env(), stderr=subprocess.PIPE
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode(errors="replace")


def log_rows(path: Path) -> list[tuple[int, str, int, str]]:
    db = sqlite3.connect(path)
    try:
        return list(db.execute("SELECT position, stream, version, type FROM events ORDER BY position"))
    finally:
        db.close()


def test_two_processes_appending_at_once_lose_nothing_and_do_not_interleave(tmp_path: Path) -> None:
    db, start = tmp_path / "db.sqlite3", tmp_path / "go"
    tx, size = 100, 10
    migrate(db)
    writers = [spawn("writer", db, name, tx, size, start) for name in ("A", "B")]
    time.sleep(1.0)  # both children import and open the store, then wait for the start file
    start.touch()
    for w in writers:
        finish(w)

    rows = log_rows(db)
    assert [r[0] for r in rows] == list(range(1, 2 * tx * size + 1))
    for name in ("A", "B"):
        mine = [r for r in rows if r[1] == task_stream(name)]
        assert [r[2] for r in mine] == list(range(1, tx * size + 1))
        for n in range(tx):  # each transaction's events sit at consecutive positions
            block = [r[0] for r in mine[n * size:(n + 1) * size]]
            assert block == list(range(block[0], block[0] + size)), f"transaction {n} of {name} interleaved"
    assert_projections_match_rebuild(db, tmp_path / "scratch.sqlite3")


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_writer_killed_mid_storm_leaves_only_whole_transactions(tmp_path: Path, synchronous: str) -> None:
    db = tmp_path / "db.sqlite3"
    pairs, size = 4, 5
    migrate(db)
    child = spawn("storm", db, synchronous, pairs, size)
    reader = sqlite3.connect(db)

    async def head() -> int:
        return int(reader.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])

    try:
        asyncio.run(kill_mid_storm(child, head, 400))
    finally:
        reader.close()

    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        counts = dict(raw.execute("SELECT stream, count(*) FROM events GROUP BY stream").fetchall())
        positions = [r[0] for r in raw.execute("SELECT position FROM events ORDER BY position")]
        live = dict(raw.execute("SELECT name, live FROM projection_state").fetchall())
    finally:
        raw.close()
    assert len(positions) >= 400
    assert positions == list(range(1, len(positions) + 1))
    for k in range(pairs):  # both streams of a pair are written by the same transactions
        a, b = counts.get(task_stream(f"p{k}-a"), 0), counts.get(task_stream(f"p{k}-b"), 0)
        assert a == b and a % size == 0, (k, a, b)
    # Projections were written with the events: still live, and equal to a rebuild.
    assert set(live.values()) == {1}
    assert_projections_match_rebuild(db, tmp_path / "scratch.sqlite3")

    async def reopen() -> int:
        store = await open_store(db)
        try:
            return len(await store.append(task_stream("after"), 0, [f.submitted("after")]))
        finally:
            await store.close()

    assert asyncio.run(reopen()) == 1


async def test_subscriber_sees_events_appended_by_another_process(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    store = await open_store(db)
    try:
        count = 40
        seen = asyncio.create_task(positions_seen(store, count, timeout=60))
        await asyncio.sleep(0.05)
        child = spawn("ticker", db, count, 0.005)
        positions = await seen
        await asyncio.to_thread(finish, child)
        assert positions == list(range(1, count + 1))
        assert [r.version for r in await store.read_stream(task_stream("x"))] == list(range(1, count + 1))
    finally:
        await store.close()


def test_processes_opening_a_fresh_database_at_once_all_succeed(tmp_path: Path) -> None:
    """The API and the reactor start together on a new database: one migrates, the others
    wait for it and find nothing left to do."""
    for attempt in range(3):
        db = tmp_path / f"db{attempt}.sqlite3"
        procs = [spawn("opener", db) for _ in range(3)]
        for p in procs:
            finish(p)
        conn = sqlite3.connect(db)
        try:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        finally:
            conn.close()
        assert versions == list(range(1, len(versions) + 1)) and len(versions) >= 3
