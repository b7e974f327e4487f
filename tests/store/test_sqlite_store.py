"""The SQLite event store: the shared contract at synchronous=FULL and NORMAL, plus what only
this backend has (append-only triggers, raw rows, pragmas, projection rebuild on open)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import AsyncIterator

import msgspec
import pytest

from argus.events import task_stream, user_stream
from argus.store import EventDecodeError, EventStore, LogDamaged, UnknownEventType
from projections import open_store
from projections import QueueProjection, TasksProjection
from tests.events import factories as f
from tests.projections.compare import assert_projections_match_rebuild, inline_tables
from tests.store.contract import EventStoreContract, StoreFactory
from tests.support.sql import rows


def sqlite_factory(tmp_path: Path, synchronous: str) -> tuple[StoreFactory, list[EventStore]]:
    opened: list[EventStore] = []

    async def open_named(name: str = "events", **options: object) -> EventStore:
        store = await open_store(tmp_path / f"{name}.sqlite3", synchronous=synchronous, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    return open_named, opened


class TestSQLiteStoreContract(EventStoreContract):
    @pytest.fixture(params=["FULL", "NORMAL"])
    async def store_factory(self, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
        factory, opened = sqlite_factory(tmp_path, request.param)
        yield factory
        for store in opened:
            await store.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    s = await open_store(tmp_path / "events.sqlite3", synchronous="NORMAL")
    yield s
    await s.close()


def raw_insert(path: Path | str, position: int, stream: str, version: int, type_: str, schema: int, data: bytes) -> None:
    """Write a row behind the store's back. Like a store that does not keep the
    projections, the writer marks them no longer live, so that the next open rebuilds."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(
            "INSERT INTO events (position, stream, version, type, schema_version, data, meta, owner, recorded_at)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (position, stream, version, type_, schema, data, b"{}", None, time.time()),
        )
        db.execute("UPDATE projection_state SET live = 0")
    finally:
        db.close()


# ------------------------------------------------------------------ append-only
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET type = 'TaskCanceled' WHERE position = 1",
        "UPDATE events SET data = x'00'",
        "DELETE FROM events WHERE position = 1",
        "DELETE FROM events",
    ],
)
async def test_events_table_refuses_update_and_delete(store: EventStore, sql: str) -> None:
    """UPDATE and DELETE: refused by the triggers of migration 0001."""
    await store.append(task_stream("a"), 0, [f.submitted("a"), f.deferred("a")])
    db = sqlite3.connect(store.path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql)
        assert db.execute("SELECT count(*), min(type) FROM events").fetchone() == (2, "TaskDeferred")
    finally:
        db.close()


_ROW = "(position, stream, version, type, schema_version, data, meta, owner, recorded_at)"


@pytest.mark.parametrize(
    "sql",
    [
        f"INSERT OR REPLACE INTO events {_ROW} VALUES (1, 'x', 9, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0)",
        f"REPLACE INTO events {_ROW} VALUES (1, 'x', 9, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0)",
        f"INSERT OR IGNORE INTO events {_ROW} VALUES (2, 'x', 9, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0)",
        f"INSERT INTO events {_ROW} VALUES (1, 'x', 9, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0) "
        "ON CONFLICT (position) DO UPDATE SET data = excluded.data",
        f"INSERT INTO events {_ROW} VALUES (1, 'x', 9, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0) "
        "ON CONFLICT DO NOTHING",
        # The same stream version at a new position: an upsert on the (stream, version) key.
        f"INSERT INTO events {_ROW} SELECT 3, stream, version, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0 "
        "FROM events WHERE position = 1 ON CONFLICT (stream, version) DO UPDATE SET data = excluded.data",
        f"INSERT OR REPLACE INTO events {_ROW} SELECT 3, stream, version, 'TaskCanceled', 1, x'00', x'7b7d', "
        "NULL, 0 FROM events WHERE position = 1",
        # Below the head, or with no position at all (SQLite would pick one; Argus never does).
        f"INSERT INTO events {_ROW} VALUES (0, 'x', 1, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0)",
        "INSERT INTO events (stream, version, type, schema_version, data, meta, owner, recorded_at) "
        "VALUES ('x', 1, 'TaskCanceled', 1, x'00', x'7b7d', NULL, 0)",
    ],
    ids=["or-replace", "replace", "or-ignore", "upsert-position", "do-nothing", "upsert-stream-version",
         "replace-stream-version", "below-head", "no-position"],
)
async def test_events_table_refuses_every_rewrite(store: EventStore, sql: str) -> None:
    """Conflict clauses remove or keep rows without a DELETE or UPDATE trigger firing:
    refused by migration 0006, and the log is exactly as it was."""
    await store.append(task_stream("a"), 0, [f.submitted("a"), f.deferred("a")])
    db = sqlite3.connect(store.path, isolation_level=None)
    try:
        before = db.execute("SELECT * FROM events ORDER BY position").fetchall()
        # Either the trigger refuses it, or (the stream/version upserts) the UNIQUE key does
        # after the trigger let a position past the head through: never a rewrite.
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(sql)
        assert db.execute("SELECT * FROM events ORDER BY position").fetchall() == before
    finally:
        db.close()


async def test_a_plain_insert_after_the_head_still_appends(store: EventStore) -> None:
    await store.append(task_stream("a"), 0, [f.submitted("a")])
    await store.append(task_stream("a"), 1, [f.deferred("a")])
    assert [r.position for r in await store.read(0, 10)] == [1, 2]


# ------------------------------------------------------------------ pragmas
@pytest.mark.parametrize(("mode", "code"), [("FULL", 2), ("normal", 1), ("OFF", 0)])
async def test_synchronous_mode_is_applied(tmp_path: Path, mode: str, code: int) -> None:
    s = await open_store(tmp_path / "db.sqlite3", synchronous=mode)
    try:
        assert await s._run(lambda db: db.execute("PRAGMA synchronous").fetchone()[0]) == code
        assert await s._run(lambda db: db.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"
    finally:
        await s.close()


async def test_unknown_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        await open_store(tmp_path / "db.sqlite3", synchronous="SOMETIMES")


# ------------------------------------------------------------------ bad rows in the log
async def test_unknown_event_type_in_the_log_raises_a_named_error(store: EventStore) -> None:
    await store.append(task_stream("a"), 0, [f.submitted("a")])
    raw_insert(store.path, 2, "task-a", 2, "TaskTeleported", 1, b'{"type":"TaskTeleported"}')
    with pytest.raises(UnknownEventType, match="TaskTeleported"):
        await store.read()
    assert [r.position for r in await store.read(until=1)] == [1]
    # Appends go on: the unknown row is kept, the next position follows it.
    assert await store.append(task_stream("b"), 0, [f.submitted("b")]) == [3]


async def test_newer_schema_in_the_log_raises_a_named_error(store: EventStore) -> None:
    data = msgspec.json.encode(f.submitted("a"))
    raw_insert(store.path, 1, "task-a", 1, "TaskSubmitted", 99, data)
    with pytest.raises(EventDecodeError, match="newer"):
        await store.read()


async def test_payload_that_does_not_match_its_type_raises_a_named_error(store: EventStore) -> None:
    raw_insert(store.path, 1, "task-a", 1, "TaskSubmitted", 1, b'{"type":"TaskSubmitted","task_id":1}')
    with pytest.raises(EventDecodeError):
        await store.read()


async def test_undecodable_payload_at_start_names_its_position(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    s = await open_store(path)
    await s.append(task_stream("a"), 0, [f.submitted("a")])
    await s.close()
    raw_insert(path, 2, "task-a", 2, "TaskDeferred", 1, b'{"type":"TaskDeferred","task_id":"a"}')
    # The start's check meets row 2 before the rebuild would (argus.store.integrity).
    with pytest.raises(LogDamaged, match="TaskDeferred at position 2 .* does not decode"):
        await open_store(path)


async def test_max_payload_is_configurable(tmp_path: Path) -> None:
    from argus.store import PayloadTooLarge

    s = await open_store(tmp_path / "db.sqlite3", max_payload_bytes=200)
    try:
        await s.append(user_stream("u"), 0, [f.user_created("u")])  # small: accepted
        with pytest.raises(PayloadTooLarge):
            await s.append(task_stream("a"), 0, [f.submitted("a")])  # ~400 bytes
        assert await s.head_position() == 1
    finally:
        await s.close()


@pytest.mark.parametrize("kept", ["all projections", "no projections"])
async def test_an_event_that_would_not_decode_is_refused_whole(tmp_path: Path, kept: str) -> None:
    """msgspec Structs do not check field types when built: an int where the type says str
    would encode, then fail every later read of an append-only log. Refused, whether or
    not a projection folds the event; nothing of the transaction is written."""
    from argus.store import InvalidEvent

    s = await open_store(tmp_path / "db.sqlite3", projections=None if kept == "all projections" else [])
    try:
        bad = msgspec.structs.replace(f.deferred("a"), task_id=123)  # type: ignore[arg-type]
        with pytest.raises(InvalidEvent, match="TaskDeferred does not match its type.*task_id"):
            await s.append(task_stream("a"), 0, [f.submitted("a"), bad])
        assert await s.head_position() == 0
    finally:
        await s.close()


# ------------------------------------------------------------------ rebuild on open
async def test_projection_with_a_new_version_is_rebuilt_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.sqlite3"
    s = await open_store(path)
    await s.append(task_stream("a"), 0, [f.submitted("a"), f.deferred("a")])
    await s.close()
    # Corrupt the read model by hand; only a rebuild can bring the row back.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE tasks SET state = 'BOGUS'")
    db.close()

    s = await open_store(path)  # same versions, checkpoint at head: nothing rebuilt
    assert await rows(s, "SELECT state FROM tasks") == [("BOGUS",)]
    await s.close()

    monkeypatch.setattr(TasksProjection, "version", TasksProjection.version + 1)
    s = await open_store(path)
    try:
        assert await rows(s, "SELECT state FROM tasks") == [("PENDING_RESOURCES",)]
        assert await rows(s, "SELECT version, checkpoint FROM projection_state WHERE name = 'tasks'") == [
            (TasksProjection.version, 2)
        ]
    finally:
        await s.close()


async def test_projection_behind_the_log_is_rebuilt_on_open(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    s = await open_store(path)
    await s.append(task_stream("a"), 0, [f.submitted("a")])
    await s.close()
    raw_insert(path, 2, "task-a", 2, "TaskDeferred", 1, msgspec.json.encode(f.deferred("a")))
    s = await open_store(path)
    try:
        assert await rows(s, "SELECT state, stream_version FROM tasks") == [("PENDING_RESOURCES", 2)]
        assert await rows(s, "SELECT DISTINCT checkpoint FROM projection_state") == [(2,)]
    finally:
        await s.close()
    assert_projections_match_rebuild(path, tmp_path / "scratch.sqlite3")


async def test_store_opened_with_some_projections_leaves_the_others_behind(tmp_path: Path) -> None:
    """A store that does not maintain a projection must not advance its checkpoint, or the
    next full store would trust a stale table."""
    path = tmp_path / "db.sqlite3"
    s = await open_store(path)
    await s.close()
    partial = await open_store(path, projections=[TasksProjection()])
    await partial.append(task_stream("a"), 0, [f.submitted("a")])
    await partial.close()
    assert inline_tables(path)["queue"] == []
    s = await open_store(path)
    try:
        assert await rows(s, "SELECT task_id, state FROM queue") == [("a", "QUEUED")]
    finally:
        await s.close()
    assert_projections_match_rebuild(path, tmp_path / "scratch.sqlite3")


async def test_a_full_store_appending_later_does_not_hide_a_partial_stores_gap(tmp_path: Path) -> None:
    """Two stores at once: the partial one's appends skip ``queue``; the full one's later
    appends fold ``queue`` again, but cannot make it whole: it stays marked for rebuild."""
    path = tmp_path / "db.sqlite3"
    full = await open_store(path)
    partial = await open_store(path, projections=[TasksProjection()])
    await partial.append(task_stream("a"), 0, [f.submitted("a")])
    await partial.close()
    await full.append(task_stream("b"), 0, [f.submitted("b")])
    await full.close()
    assert inline_tables(path)["queue"] == [inline_tables(path)["queue"][0]]  # only b's row
    s = await open_store(path)
    try:
        assert await rows(s, "SELECT task_id FROM queue ORDER BY task_id") == [("a",), ("b",)]
    finally:
        await s.close()
    assert_projections_match_rebuild(path, tmp_path / "scratch.sqlite3")


async def test_a_projection_without_the_home_of_its_fold_is_refused(tmp_path: Path) -> None:
    """``queue`` is folded from the TaskView that ``tasks`` keeps: kept alone, its loads
    would read a table nobody updates."""
    with pytest.raises(ValueError, match="queue need 'tasks'"):
        await open_store(tmp_path / "db.sqlite3", projections=[QueueProjection()])


async def test_explicit_rebuild_restores_the_tables(store: EventStore, tmp_path: Path) -> None:
    await store.append(task_stream("a"), 0, f.happy_path("a"))
    await store.append(task_stream("b"), 0, [f.submitted("b"), f.cancel_requested("b"), f.canceled("b")])
    before = inline_tables(store.path)
    await store._run(lambda db: db.execute("DELETE FROM attempts"))
    assert await store.rebuild() == 10
    assert inline_tables(store.path) == before
