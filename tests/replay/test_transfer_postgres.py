"""Moving a log between SQLite and PostgreSQL with ``argus replay export``/``import``: the
lines round-trip byte for byte both ways, and ``replay verify`` is clean on the SQLite end
(the read models are not kept on PostgreSQL yet, so verify runs where they are)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import ImportRefused, export_jsonl, import_jsonl, verify
from tests.replay.scenario import Scenario
from tests.support.postgres import PostgresServer


def _export(db: str | Path) -> bytes:
    buf = io.BytesIO()
    export_jsonl(db, buf)
    return buf.getvalue()


def test_sqlite_to_postgres_and_back_is_byte_identical_and_verifies(
        scenario: Scenario, postgres_server: PostgresServer, tmp_path: Path) -> None:
    dump = _export(scenario.db)
    url = asyncio.run(postgres_server.new_database())
    report = import_jsonl(io.BytesIO(dump), url)
    assert (report.events, report.first_position, report.last_position, report.rebuilt) == (40, 1, 40, False)
    assert _export(url) == dump  # every column, every byte
    back = tmp_path / "back.sqlite3"
    assert import_jsonl(io.BytesIO(_export(url)), back).rebuilt
    assert verify(back).ok and _export(back) == dump


def test_the_cli_moves_a_log_to_postgres(scenario: Scenario, postgres_server: PostgresServer, tmp_path: Path) -> None:
    url = asyncio.run(postgres_server.new_database())
    dump = tmp_path / "log.jsonl"
    runner = CliRunner()
    out = runner.invoke(replay, ["--db", str(scenario.db), "export", "-o", str(dump)])
    assert out.exit_code == 0, out.output
    with_password = url.replace("@", ":s3cret@", 1)  # the throwaway server trusts, and ignores it
    out = runner.invoke(replay, ["import", str(dump), with_password])
    assert out.exit_code == 0, out.output
    assert "s3cret" not in out.output and ":***@" in out.output
    assert "imported 40 events (positions 1..40)" in out.output and "each host's copy makes its read models" in out.output
    again = tmp_path / "again.jsonl"
    out = runner.invoke(replay, ["--db", url, "export", "-o", str(again)])
    assert out.exit_code == 0, out.output
    assert again.read_bytes() == dump.read_bytes()
    out = runner.invoke(replay, ["--db", url, "verify"])  # said plainly, not a traceback
    assert out.exit_code == 2 and "point --db at a host's copy" in out.output
    missing = tmp_path / "not-made.jsonl"
    out = runner.invoke(replay, ["--db", str(tmp_path / "no.sqlite3"), "export", "-o", str(missing)])
    assert out.exit_code == 2 and "no database at" in out.output
    assert not missing.exists() and list(tmp_path.glob("*.partial")) == []  # no empty export left behind


def test_import_into_postgres_refuses_a_non_empty_log_and_a_gap_writing_nothing(
        scenario: Scenario, postgres_server: PostgresServer) -> None:
    dump = _export(scenario.db)
    url = asyncio.run(postgres_server.new_database())
    gap = b"\n".join(line for i, line in enumerate(dump.splitlines()) if i != 5)
    with pytest.raises(ImportRefused, match="position 7, expected 6"):
        import_jsonl(io.BytesIO(gap), url)
    assert _export(url) == b""  # all or nothing
    import_jsonl(io.BytesIO(dump), url)
    with pytest.raises(ImportRefused, match="not empty"):
        import_jsonl(io.BytesIO(dump), url)
    odd = dump.replace(b'"type":"TaskSubmitted"', b'"type":"NoSuchEvent"', 1)
    fresh = asyncio.run(postgres_server.new_database())
    with pytest.raises(ImportRefused, match="not a valid log"):
        import_jsonl(io.BytesIO(odd), fresh)
    assert _export(fresh) == b""


def test_a_log_on_postgres_that_cannot_be_opened_is_one_line_saying_what_to_change(
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    """No traceback and never the password: no such database, no server on that port."""
    import socket

    runner = CliRunner()
    no_database = f"postgresql://postgres:s3cret@127.0.0.1:{postgres_server.port}/no_such_db"
    out = runner.invoke(replay, ["--db", no_database, "export", "-o", str(tmp_path / "a.jsonl")])
    assert out.exit_code == 2 and "create it first" in out.output, out.output
    said = [out.output]
    assert not (tmp_path / "a.jsonl").exists()
    (tmp_path / "b.jsonl").write_bytes(b"")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once this closes
    out = runner.invoke(replay, ["import", str(tmp_path / "b.jsonl"), f"postgresql://argus:s3cret@127.0.0.1:{closed}/argus"])
    assert out.exit_code == 2 and "is PostgreSQL running" in out.output, out.output
    for output in (*said, out.output):
        assert "s3cret" not in output and "Traceback" not in output and ":***@" in output
