"""A long log is folded by several processes (``projections.parallel``): the tables must be
the ones a one-process fold writes, and anything odd must fall back to that fold."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from argus.events import EventBase, cluster_stream, encode_event, task_stream, user_stream
from argus.store import migrate
from projections import rebuild_projections
from projections import parallel
from argus.store import EVENT_COLUMNS
from projections import FoldPlan, default_projections
from tests.events import factories as f
from tests.projections.compare import dump_projections


def write_log(path: Path, streams: list[tuple[str, str | None, list[EventBase]]]) -> None:
    """Interleave the streams' events round-robin into a fresh log (as concurrent work would)."""
    migrate(path)
    rows, position = [], 0
    versions = {stream: 0 for stream, _, _ in streams}
    pending = [(stream, owner, list(events)) for stream, owner, events in streams]
    while any(events for _, _, events in pending):
        for stream, owner, events in pending:
            if events:
                position += 1
                versions[stream] += 1
                type_, schema, data = encode_event(events.pop(0))
                rows.append((position, stream, versions[stream], type_, schema, data, b"{}", owner, time.time()))
    db = sqlite3.connect(path, isolation_level=None)
    db.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", rows)
    db.close()


def rebuilt(path: Path, *, parallel_fold: bool) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        rebuild_projections(db, db, default_projections(), parallel=parallel_fold)
        db.execute("COMMIT")
        return dump_projections(db)
    finally:
        db.close()


@pytest.fixture
def always_parallel(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Fold in parallel whatever the log's length, on two shares at least; record whether
    the parallel fold was used (True) or fell back (False)."""
    used: list[bool] = []
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(parallel, "_shares", lambda: 2)
    real = parallel.rebuild_in_parallel

    def spy(*args: object) -> bool:
        done = real(*args)  # type: ignore[arg-type]
        used.append(done)
        return done

    monkeypatch.setattr(parallel, "rebuild_in_parallel", spy)
    return used


def mixed_streams(n_tasks: int) -> list[tuple[str, str | None, list[EventBase]]]:
    streams: list[tuple[str, str | None, list[EventBase]]] = [
        (user_stream("alice"), "alice", [f.user_created("alice"), f.token_issued("alice", "tok1")]),
        (user_stream("bob"), "bob", [f.user_created("bob"), f.user_disabled("bob")]),
        (cluster_stream, None, [f.capacity({"n1": 4}), f.unreachable(), f.capacity({"n1": 2, "n2": 8})]),
    ]
    for i in range(n_tasks):
        tid = f"t{i:04d}{'abcdefgh'[i % 8]}"
        user = ["alice", "bob"][i % 2]
        events = f.happy_path(tid, user) if i % 3 else [f.submitted(tid, user), f.deferred(tid)]
        streams.append((task_stream(tid), user, events))
    return streams


def test_parallel_fold_writes_what_one_process_writes(tmp_path: Path, always_parallel: list[bool]) -> None:
    write_log(tmp_path / "log.sqlite3", mixed_streams(60))
    one = rebuilt(tmp_path / "log.sqlite3", parallel_fold=False)
    several = rebuilt(tmp_path / "log.sqlite3", parallel_fold=True)
    assert always_parallel == [True]
    assert several == one
    assert len(one["tasks"]) == 60 and len(one["queue"]) == 20  # not vacuous


def test_a_key_whose_events_span_shares_falls_back_to_one_process(
    tmp_path: Path, always_parallel: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task ``a``'s events written to two streams that land in different shares: folded
    apart they would be wrong, so the parallel fold gives up and one process folds."""
    apart = [parallel.Share(None, "task-odd-2"), parallel.Share("task-odd-2", None)]
    monkeypatch.setattr(parallel, "split_streams", lambda db, count, **_: apart)
    streams = mixed_streams(10)
    streams.append(("task-odd-1", "alice", [f.submitted("a")]))
    streams.append(("task-odd-2", "alice", [f.deferred("a")]))
    write_log(tmp_path / "log.sqlite3", streams)
    several = rebuilt(tmp_path / "log.sqlite3", parallel_fold=True)
    assert always_parallel == [False]
    assert several == rebuilt(tmp_path / "log.sqlite3", parallel_fold=False)
    assert ("a", "PENDING_RESOURCES") in [(r[0], r[4]) for r in several["tasks"]]


def test_no_parallel_fold_for_a_short_log_or_an_in_memory_database() -> None:
    db = sqlite3.connect(":memory:")
    assert parallel.rebuild_in_parallel(db, db, FoldPlan(default_projections()), 10**9) is False


def test_shares_cover_every_stream_once_and_balance_a_busy_stream(tmp_path: Path) -> None:
    streams = mixed_streams(40)
    streams.append((cluster_stream, None, [f.capacity({"n1": float(i % 4)}) for i in range(150)]))
    write_log(tmp_path / "log.sqlite3", streams)
    db = sqlite3.connect(tmp_path / "log.sqlite3")
    total = db.execute("SELECT count(*) FROM events").fetchone()[0]
    shares = parallel.split_streams(db, 2)
    per_share = [[r[0] for r in db.execute("SELECT position FROM events WHERE 1" + s.sql()[0], s.sql()[1])]
                 for s in shares]
    assert sorted(p for share in per_share for p in share) == list(range(1, total + 1))
    # The cluster stream (~half the log) has a share of its own; the tasks fill the other.
    sizes = sorted(len(share) for share in per_share)
    assert sizes[1] - sizes[0] < total * 0.2, sizes


def test_events_not_yet_committed_by_the_caller_fall_back_to_one_process(
    tmp_path: Path, always_parallel: list[bool]
) -> None:
    """Helpers read only what is committed: when the caller's own transaction holds new
    events, a parallel fold would miss them, so it is not used."""
    path = tmp_path / "log.sqlite3"
    write_log(path, mixed_streams(20))
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        head = db.execute("SELECT max(position) FROM events").fetchone()[0]
        type_, schema, data = encode_event(f.submitted("late"))
        db.execute(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                   (head + 1, task_stream("late"), 1, type_, schema, data, b"{}", "alice", time.time()))
        rebuild_projections(db, db, default_projections())
        tasks = [r[0] for r in db.execute("SELECT task_id FROM tasks")]
        db.execute("ROLLBACK")
    finally:
        db.close()
    assert always_parallel == [False]
    assert "late" in tasks and len(tasks) == 21
