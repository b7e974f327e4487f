"""The log under damage (issue 54), with real files: each damage is refused at start with
a message naming it, or served for reads only by the admin's choice; nothing new is
written into a damaged file, and no position is given twice."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest

from argus.events import task_stream
from argus.store import AppendBatch, EventStore, LogDamaged
from argus.store.integrity import accept_loss, check_log, find_tampering, highwater_path
from projections import open_store
from tests.events import factories as f

USERS = ("alice", "bob")


async def _submit(store: EventStore, first: int, n: int) -> list[int]:
    """``n`` tasks (each its own transaction, as the API appends them); their positions."""
    positions = []
    for i in range(first, first + n):
        batch = AppendBatch(stream=task_stream(f"t{i:03d}"), expected_version=0,
                            events=[f.submitted(f"t{i:03d}", USERS[i % 2])], owner=USERS[i % 2])
        positions += await store.append_batches([batch])
    return positions


def _log(path: Path, n: int = 40) -> list[int]:
    """A closed log of ``n`` submitted tasks (the WAL checkpointed into the file)."""
    async def go() -> list[int]:
        store = await open_store(path)
        try:
            return await _submit(store, 0, n)
        finally:
            await store.close()
    return asyncio.run(go())


def _payload(path: Path, position: int) -> bytes:
    conn = sqlite3.connect(path)
    try:
        return bytes(conn.execute("SELECT data FROM events WHERE position = ?", (position,)).fetchone()[0])
    finally:
        conn.close()


def _files(path: Path) -> dict[str, bytes]:
    """The database, its WAL and its high-water file (an empty WAL is none: a read-only
    connection makes one, with the -shm index, and writes nothing into either)."""
    return {p.name: p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name)
            and not p.name.endswith("-shm") and p.stat().st_size > 0}


def _refused(path: Path) -> LogDamaged:
    before = _files(path)
    with pytest.raises(LogDamaged) as caught:
        asyncio.run(open_store(path))
    assert _files(path) == before, "a refused start wrote into the file"
    return caught.value


def _serves_reads_only(path: Path, kind: str) -> None:
    """With on_damage=serve_reads: reads answer, every write is refused, the file unchanged."""
    before = _files(path)

    async def go() -> None:
        store = await open_store(path, on_damage="serve_reads")
        try:
            assert store.damage is not None and store.damage.kind == kind
            assert (await store.read_snapshot(lambda c: c.execute("SELECT count(*) FROM sqlite_master").fetchone()))[0]
            if kind != "malformed":  # a damaged page fails the reads that touch it (the API says so)
                assert await store.head_position() > 0
            with pytest.raises(LogDamaged):
                await _submit(store, 900, 1)
            with pytest.raises(LogDamaged):
                await store.claim_lease("reactor", "me", 10)
        finally:
            await store.close()
    asyncio.run(go())
    assert _files(path) == before


def test_a_whole_log_opens_and_each_start_reads_only_what_is_new(tmp_path: Path) -> None:
    path = tmp_path / "argus.sqlite3"
    positions = _log(path, 10)
    assert int(highwater_path(path).read_text()) == positions[-1]
    assert highwater_path(path).stat().st_mode & 0o777 == 0o600
    again = check_log(str(path))
    # The first start checked nothing (empty); the ten appended since are read at the next.
    assert again.damage is None and again.head == 10 and again.checked == 10
    _log(path, 0)  # a start: it checks those ten and moves the verified point to them
    assert check_log(str(path)).checked == 0


def test_a_btree_page_header_overwritten_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "argus.sqlite3"
    _log(path)
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    conn.close()
    with path.open("r+b") as fh:  # the log's b-tree root page: its header is the page's first bytes
        fh.seek((root - 1) * page_size)
        fh.write(b"\x2a" * 12)
    damage = _refused(path)
    assert damage.damage.kind == "malformed"
    assert "quick_check" in str(damage) or "malformed" in str(damage)
    assert "argus replay --db" in str(damage) and "serve_reads" in str(damage)
    _serves_reads_only(path, "malformed")


def test_64_garbled_bytes_of_one_submission_are_refused_naming_the_position(tmp_path: Path) -> None:
    path = tmp_path / "argus.sqlite3"
    positions = _log(path)
    victim = positions[17]
    data = _payload(path, victim)
    raw = path.read_bytes()
    at = raw.index(data) + 20
    assert raw.count(data) == 1
    path.write_bytes(raw[:at] + bytes(range(100, 164)) + raw[at + 64:])
    damage = _refused(path)
    assert damage.damage.kind in ("undecodable", "tampered") and damage.damage.position == victim
    assert f"position {victim}" in str(damage)
    _serves_reads_only(path, damage.damage.kind)


def test_a_user_rewritten_in_place_is_tampering_at_its_position(tmp_path: Path) -> None:
    path = tmp_path / "argus.sqlite3"
    positions = _log(path)
    victim = positions[4]  # alice's
    data = _payload(path, victim)
    assert b'"user":"alice"' in data
    raw = path.read_bytes()
    path.write_bytes(raw.replace(data, data.replace(b'"user":"alice"', b'"user":"bobby"')))
    damage = _refused(path)
    assert damage.damage.kind == "tampered" and damage.damage.position == victim
    assert f"TaskSubmitted at position {victim}" in str(damage)
    # verify's finder reads the whole log, whatever a start has checked already.
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    found, unsealed = find_tampering(conn, until=positions[-1])
    conn.close()
    assert [(t.position, t.kind) for t in found] == [(victim, "tampered")] and unsealed == 0
    _serves_reads_only(path, "tampered")


def _crash_copy(tmp_path: Path, n: int) -> tuple[Path, list[int]]:
    """The files as a machine that died with the log open leaves them: the database, its
    WAL (not checkpointed) and the high-water file; a new process then finds them."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir(), crashed.mkdir()

    async def go() -> list[int]:
        store = await open_store(live / "argus.sqlite3")
        try:
            positions = await _submit(store, 0, n)
            for name in ("argus.sqlite3", "argus.sqlite3-wal", "argus.sqlite3-acked"):
                shutil.copyfile(live / name, crashed / name)
            return positions
        finally:
            await store.close()
    positions = asyncio.run(go())
    assert (crashed / "argus.sqlite3-wal").stat().st_size > 0
    return crashed / "argus.sqlite3", positions


@pytest.mark.parametrize("cut", ["mid-frame", "half"])
def test_a_cut_wal_is_refused_until_the_loss_is_accepted_and_positions_are_not_reused(
        tmp_path: Path, cut: str) -> None:
    path, positions = _crash_copy(tmp_path, 40)
    wal = path.with_name(path.name + "-wal")
    size = wal.stat().st_size
    with wal.open("r+b") as fh:
        fh.truncate(size - 100 if cut == "mid-frame" else size // 2)
    damage = _refused(path)
    missing = damage.damage.missing
    assert damage.damage.kind == "missing" and 1 <= missing <= 40
    assert f"{missing} acknowledged event(s) are missing" in str(damage)
    assert f"argus db accept-loss --db {path} --missing {missing}" in str(damage)
    _serves_reads_only(path, "missing")

    with pytest.raises(ValueError, match="nothing was recorded"):
        accept_loss(str(path), missing + 1, "admin")
    assert accept_loss(str(path), missing, "admin") == (positions[-1] - missing + 1, positions[-1])

    async def after() -> list[int]:
        store = await open_store(path)
        try:
            return await _submit(store, 100, 2)
        finally:
            await store.close()
    assert asyncio.run(after()) == [positions[-1] + 1, positions[-1] + 2]  # never a lost one's


def test_a_log_put_back_from_an_old_copy_is_behind_its_high_water_mark(tmp_path: Path) -> None:
    path = tmp_path / "argus.sqlite3"
    _log(path, 5)
    old = path.read_bytes()

    async def more() -> None:
        store = await open_store(path)
        try:
            await _submit(store, 50, 3)
        finally:
            await store.close()
    asyncio.run(more())
    path.write_bytes(old)
    damage = _refused(path)
    assert damage.damage.kind == "missing" and damage.damage.missing == 3


def test_the_high_water_mark_only_grows_whoever_writes_it(tmp_path: Path) -> None:
    from argus.store.integrity import HighWater, read_highwater

    db = tmp_path / "argus.sqlite3"
    a, b = HighWater(db, fsync=True), HighWater(db, fsync=True)
    try:
        a.stage(10)
        b.stage(7)  # another process, behind: the file keeps 10
        assert read_highwater(highwater_path(db)) == 10 and b.known == 10
        asyncio.run(a.durable(10))
        assert a.synced == 10
        highwater_path(db).write_text("not a position\n")
        assert check_log(str(db)).damage.kind == "highwater"  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()
