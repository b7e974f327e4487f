"""export → import → verify round-trips byte-identical events."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import ImportRefused, export_jsonl, import_jsonl, verify, world_at
from argus.store import EVENT_COLUMNS
from tests.replay.scenario import Scenario


def _events(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        cols = EVENT_COLUMNS + ", typeof(data), typeof(meta), typeof(recorded_at)"
        return conn.execute(f"SELECT {cols} FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


def _export(db: Path, **kw: int) -> bytes:
    buf = io.BytesIO()
    export_jsonl(db, buf, **kw)
    return buf.getvalue()


def test_round_trip_is_byte_identical_and_verifies(scenario: Scenario, tmp_path: Path) -> None:
    dump = _export(scenario.db)
    lines = dump.splitlines()
    assert len(lines) == 40
    first = json.loads(lines[0])  # other tools read real JSON objects
    assert first["type"] == "UserCreated" and first["data"]["user_id"] == "alice"
    assert first["meta"] == {} and first["owner"] == "alice"  # actor "system" is the default
    assert json.loads(lines[4])["meta"] == {"actor": "user:bob"}
    target = tmp_path / "forensics.sqlite3"
    report = import_jsonl(io.BytesIO(dump), target)
    assert (report.events, report.first_position, report.last_position, report.rebuilt) == (40, 1, 40, True)
    assert _events(target) == _events(scenario.db)
    assert verify(target).ok
    assert world_at(target, 25) == world_at(scenario.db, 25)
    assert _export(target) == dump


def test_range_export_and_partial_import(scenario: Scenario, tmp_path: Path) -> None:
    part = _export(scenario.db, after=10, until=20)
    assert [json.loads(line)["position"] for line in part.splitlines()] == list(range(11, 21))
    with pytest.raises(ImportRefused, match="starts at position 11"):
        import_jsonl(io.BytesIO(part), tmp_path / "a.sqlite3")
    report = import_jsonl(io.BytesIO(part), tmp_path / "b.sqlite3", allow_partial=True)
    assert (report.events, report.rebuilt) == (10, False)
    assert _events(tmp_path / "b.sqlite3") == _events(scenario.db)[10:20]


def test_import_refuses_a_non_empty_database_and_gaps(scenario: Scenario, db_copy: Path, tmp_path: Path) -> None:
    dump = _export(scenario.db)
    with pytest.raises(ImportRefused, match="not empty"):
        import_jsonl(io.BytesIO(dump), db_copy)
    gap = b"\n".join(line for i, line in enumerate(dump.splitlines()) if i != 5)
    with pytest.raises(ImportRefused, match="position 7, expected 6"):
        import_jsonl(io.BytesIO(gap), tmp_path / "gap.sqlite3")
    conn = sqlite3.connect(tmp_path / "gap.sqlite3")
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)  # all or nothing
    conn.close()


def test_non_json_payload_survives_as_base64(tmp_path: Path) -> None:
    # A damaged row (not JSON; whitespace around JSON) must still round-trip exactly.
    src = tmp_path / "odd.sqlite3"
    from argus.store.migrate import migrate

    migrate(src)
    conn = sqlite3.connect(src)
    with conn:
        conn.execute(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (1,'x',1,'Odd',1,?,?,NULL,1.5)",
                     (b"\xff\x00not json", b' {"actor":"system"} '))
    conn.close()
    dump = _export(src)
    doc = json.loads(dump)
    assert "data_b64" in doc and "meta_b64" in doc and doc["owner"] is None
    import_jsonl(io.BytesIO(dump), tmp_path / "copy.sqlite3", allow_partial=True)
    assert _events(tmp_path / "copy.sqlite3") == _events(src)


def test_cli_export_import(scenario: Scenario, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "log.jsonl"
    res = runner.invoke(replay, ["--db", str(scenario.db), "export", "-o", str(out)])
    assert res.exit_code == 0, res.output
    target = tmp_path / "t.sqlite3"
    res = runner.invoke(replay, ["import", str(out), str(target)])
    assert res.exit_code == 0 and "imported 40 events (positions 1..40)" in res.output
    again = runner.invoke(replay, ["import", str(out), str(target)])
    assert again.exit_code == 2 and "not empty" in again.output
    assert runner.invoke(replay, ["--db", str(target), "verify"]).exit_code == 0
