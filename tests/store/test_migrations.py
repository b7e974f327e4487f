"""Schema migrations: empty to head, every earlier version upgraded with its events kept,
refusal of a newer database, whole-version failure, concurrent first opens, and ``argus db``."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.cli import main
from argus.events import task_stream, user_stream
from argus.store import MigrationError, current_version, migrate
from projections import open_store
from argus.store.migrate import Migration, available_migrations
from tests.events import factories as f
from tests.projections.compare import assert_projections_match_rebuild
from projections import TasksProjection
from projections.tasks_read import all_tasks

HEAD = available_migrations()[-1].version


def tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")}
    finally:
        db.close()


def version_of(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return current_version(db)
    finally:
        db.close()


def test_shipped_migrations_are_numbered_from_one() -> None:
    assert [m.version for m in available_migrations()] == list(range(1, HEAD + 1))
    assert HEAD >= 3


def test_empty_to_head(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    assert migrate(db) == list(range(1, HEAD + 1))
    assert version_of(db) == HEAD
    assert {"events", "events_no_update", "events_no_delete", "tasks", "queue", "users",
            "subscriber_checkpoints", "leases", "projection_state"} <= tables(db)
    assert migrate(db) == []  # idempotent


async def _history(path: Path) -> None:
    store = await open_store(path)
    try:
        await store.append(user_stream("alice"), 0, [f.user_created("alice"), f.token_issued("alice", "k1")])
        await store.append(task_stream("a"), 0, f.happy_path("a"), owner="alice")
        await store.append(task_stream("b"), 0, [f.submitted("b"), f.deferred("b")], owner="alice")
        await store.append(task_stream("c"), 0, [f.submitted("c"), f.cancel_requested("c"), f.canceled("c")])
    finally:
        await store.close()


EVENT_ROWS = "SELECT position, stream, version, type, schema_version, data, meta, owner, recorded_at FROM events ORDER BY position"


@pytest.mark.parametrize("start", range(1, HEAD))
def test_every_earlier_version_upgrades_keeping_every_event(tmp_path: Path, start: int) -> None:
    reference = tmp_path / "reference.sqlite3"
    asyncio.run(_history(reference))
    ref = sqlite3.connect(reference)
    expected = ref.execute(EVENT_ROWS).fetchall()
    ref.close()

    old = tmp_path / "old.sqlite3"
    assert migrate(old, target=start) == list(range(1, start + 1))
    conn = sqlite3.connect(old, isolation_level=None)
    # The columns named: from version 22 on the table also has each event's digest (NULL:
    # written before it, nothing to compare with).
    columns = EVENT_ROWS.split("SELECT ", 1)[1].split(" FROM", 1)[0]
    conn.executemany(f"INSERT INTO events ({columns}) VALUES ({','.join('?' * 9)})", expected)
    conn.close()
    assert version_of(old) == start

    async def upgrade() -> list[tuple[object, ...]]:
        store = await open_store(old)  # migrates to head and rebuilds the read models
        try:
            assert len(await store.read(limit=100)) == len(expected)
            views = await store.read_snapshot(all_tasks)
            return sorted((v.task_id, v.state.value) for v in views)
        finally:
            await store.close()

    assert asyncio.run(upgrade()) == [("a", "SUCCEEDED"), ("b", "PENDING_RESOURCES"), ("c", "CANCELED")]
    assert version_of(old) == HEAD
    conn = sqlite3.connect(old)
    assert conn.execute(EVENT_ROWS).fetchall() == expected  # byte for byte
    conn.close()
    assert_projections_match_rebuild(old, tmp_path / "scratch.sqlite3")


def test_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    migrate(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from_the_future', 0)", (HEAD + 1,))
    conn.close()
    with pytest.raises(MigrationError, match="newer"):
        migrate(db)
    with pytest.raises(MigrationError):
        asyncio.run(open_store(db))


def test_failing_migration_leaves_the_previous_whole_version(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    broken = [
        *available_migrations(),
        Migration(HEAD + 1, "half_done", "CREATE TABLE half (a INTEGER);\nCREATE TABLE nope (a REFERENCES;\n"),
    ]
    with pytest.raises(MigrationError):
        migrate(db, migrations=broken)
    assert version_of(db) == HEAD
    assert "half" not in tables(db)


def test_gaps_in_migration_numbers_are_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x);")
    (tmp_path / "0003_c.sql").write_text("CREATE TABLE c (x);")
    with pytest.raises(MigrationError, match="numbers"):
        available_migrations(tmp_path)


def test_migrations_racing_on_a_fresh_database_all_succeed(tmp_path: Path) -> None:
    for round_ in range(5):
        db = tmp_path / f"db{round_}.sqlite3"
        errors: list[BaseException] = []
        applied: list[list[int]] = []

        def run() -> None:
            try:
                applied.append(migrate(db))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(v for a in applied for v in a) == list(range(1, HEAD + 1))  # each applied once
        assert version_of(db) == HEAD


# ------------------------------------------------------------------ argus db
def test_cli_migrate_and_status(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "argus.sqlite3"
    runner = CliRunner()
    result = runner.invoke(main, ["db", "migrate", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"now at version {HEAD}" in result.output
    result = runner.invoke(main, ["db", "migrate", "--db", str(db)])
    assert "nothing to do" in result.output
    asyncio.run(_history(db))
    result = runner.invoke(main, ["db", "status", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"schema version: {HEAD}" in result.output
    assert "pending:        none" in result.output
    assert "events:         14 (head position 14)" in result.output
    assert f"projection:     tasks v{TasksProjection.version} live, at the head" in result.output


def test_cli_uses_the_configured_path_and_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "configured.sqlite3"
    monkeypatch.setenv("ARGUS_V2__SQLITE__DB_PATH", str(db))
    runner = CliRunner()
    result = runner.invoke(main, ["db", "migrate", "--target", "1"])
    assert result.exit_code == 0, result.output
    assert version_of(db) == 1
    result = runner.invoke(main, ["db", "status"])
    assert "schema version: 1" in result.output
    assert "0002_projections" in result.output


def test_cli_status_of_a_missing_database_fails(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["db", "status", "--db", str(tmp_path / "missing.sqlite3")])
    assert result.exit_code != 0
    assert "does not exist" in result.output
    assert not (tmp_path / "missing.sqlite3").exists()
