"""The database file's facts and read-only opening (``argus.store.dbfile``), and the
projections' state beside it (``projections.rebuild.projection_states``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import argus.store.dbfile as dbfile
from argus.store import database_facts, event_recorded_at, migrate, open_read_only, position_at_time, read_transaction
from projections.rebuild import ProjectionState, projection_states


def _db(path: Path, target: int | None = None) -> Path:
    migrate(path, target=target)
    return path


def test_facts_of_a_fresh_database_and_no_writes(tmp_path: Path) -> None:
    path = _db(tmp_path / "db.sqlite3")
    before = path.read_bytes()
    with open_read_only(path) as (conn, copied):
        facts = database_facts(conn, counts=True)
        with read_transaction(conn):
            assert position_at_time(conn, 1e12) == 0 and event_recorded_at(conn, 1) is None
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("CREATE TABLE x (a)")  # read-only
    assert not copied and path.read_bytes() == before
    assert facts.has_event_log and facts.schema_version == facts.newest_known_version
    assert (facts.events, facts.head, facts.consumers) == (0, 0, {})


def test_no_copy_when_told_not_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _db(tmp_path / "db.sqlite3")

    def refuse(p: Path, *args: float) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(dbfile, "_connect_ro", refuse)
    with pytest.raises(sqlite3.OperationalError), open_read_only(path, copy_fallback=False):
        pass


def test_projection_states_before_and_after_the_live_column(tmp_path: Path) -> None:
    old = _db(tmp_path / "old.sqlite3", target=4)  # projection_state without ``live``
    conn = sqlite3.connect(old)
    conn.execute("INSERT INTO projection_state (name, version, checkpoint) VALUES ('tasks', 3, 7)")
    conn.commit()
    assert projection_states(conn) == [ProjectionState(name="tasks", version=3, checkpoint=7, live=False)]
    conn.close()
    bare = sqlite3.connect(tmp_path / "bare.sqlite3")
    assert projection_states(bare) == []
    bare.close()
