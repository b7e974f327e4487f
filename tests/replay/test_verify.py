"""verify: passes on a consistent log, fails and names the row after a corruption."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import verify
from tests.replay.scenario import A, B, E, Scenario


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.parent.glob(path.name + "*")):  # the db, its -wal and -shm
        if not p.name.endswith("-shm"):
            h.update(p.read_bytes())
    return h.hexdigest()


def _corrupt(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(db)
    with conn:
        assert conn.execute(sql, params).rowcount == 1
    conn.close()


def test_verify_passes_on_recorded_scenario(scenario: Scenario) -> None:
    report = verify(scenario.db)
    assert report.ok, report.render()
    assert report.position == scenario.captures[-1].position
    assert report.rows_compared["tasks"] == 5
    assert report.rows_compared["attempts"] == 4  # A1, B1, B2, D1
    assert report.rows_compared["queue"] == 1  # only E is unfinished


def test_verify_never_writes_to_the_inspected_file(scenario: Scenario) -> None:
    before = _digest(scenario.db)
    assert verify(scenario.db).ok
    assert _digest(scenario.db) == before


def test_corrupted_state_is_named_with_table_key_and_values(db_copy: Path) -> None:
    _corrupt(db_copy, "UPDATE tasks SET state = 'RUNNING' WHERE task_id = ?", (A,))
    report = verify(db_copy)
    assert not report.ok
    [diff] = report.diffs
    assert (diff.table, diff.key) == ("tasks", [A])
    assert diff.live == {"state": "RUNNING"} and diff.rebuilt == {"state": "SUCCEEDED"}
    assert f"tasks {A}: live={{'state': 'RUNNING'}} rebuilt={{'state': 'SUCCEEDED'}}" in report.render()


def test_corrupted_view_blob_is_detected(db_copy: Path) -> None:
    _corrupt(db_copy, "UPDATE tasks SET view = replace(view, 'INSUFFICIENT', 'UNKNOWN_XX') WHERE task_id = ?", (B,))
    report = verify(db_copy)
    assert [(d.table, d.key, list(d.live or {})) for d in report.diffs] == [("tasks", [B], ["view"])]


def test_missing_and_extra_rows_are_reported(db_copy: Path) -> None:
    _corrupt(db_copy, "DELETE FROM queue WHERE task_id = ?", (E,))
    _corrupt(db_copy, "INSERT INTO user_task_counts VALUES ('mallory', 'RUNNING', 1)")
    found = {(d.table, tuple(d.key)): d for d in verify(db_copy).diffs}
    assert found[("queue", (E,))].live is None and found[("queue", (E,))].rebuilt is not None
    extra = found[("user_task_counts", ("mallory", "RUNNING"))]
    assert extra.rebuilt is None and extra.live == {"user": "mallory", "state": "RUNNING", "n": 1}
    assert len(found) == 2


def test_cli_verify_exit_codes(scenario: Scenario, db_copy: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(replay, ["--db", str(scenario.db), "verify"])
    assert ok.exit_code == 0, ok.output
    assert "OK: projections equal the log" in ok.output
    _corrupt(db_copy, "UPDATE attempts SET ray_status = 'RUNNING' WHERE task_id = ? AND attempt_no = 2", (B,))
    bad = runner.invoke(replay, ["--db", str(db_copy), "verify"])
    assert bad.exit_code == 1
    assert f"attempts ('{B}', 2): live={{'ray_status': 'RUNNING'}} rebuilt={{'ray_status': 'SUCCEEDED'}}" in bad.output
    missing = runner.invoke(replay, ["--db", str(db_copy.with_name("nope.sqlite3")), "verify"])
    assert missing.exit_code == 2 and "no database" in missing.output


def test_falls_back_to_a_copy_when_read_only_open_fails(scenario: Scenario, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A WAL database in a read-only directory cannot get its -shm; simulate that refusal.
    import argus.store.dbfile as source

    real, calls = source._connect_ro, []

    def refuse_in_place(path: Path, *args: float) -> sqlite3.Connection:
        calls.append(path)
        if path == scenario.db:
            raise sqlite3.OperationalError("unable to open database file")
        return real(path, *args)

    monkeypatch.setattr(source, "_connect_ro", refuse_in_place)
    report = verify(scenario.db)
    assert report.ok and report.copied
    assert len(calls) == 2 and calls[1] != scenario.db
