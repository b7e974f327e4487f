"""The log on PostgreSQL read through local copies (``argus.store.mirror.MirroredStore``):
the event log contract, with every ``open_log`` a new host (its own copy of the shared
log, its own read models), and what the copies add: each host's read models follow every
other host's appends, a process reads its own writes, the read models' invariants hold
before anything reaches the shared log, a lost copy is made again, a copy of another log
is refused. On the session's throwaway PostgreSQL server (``tests/support/postgres.py``)."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from argus.events import task_stream
from argus.store import InvariantViolation
from projections import open_store
from projections.tasks_read import task_view
from tests.events import factories as f
from tests.projections.compare import dump_projections
from tests.store import test_log_postgres as postgres_log
from tests.support.postgres import PostgresServer

asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")

Host = Callable[[str], Awaitable[Any]]


@pytest.fixture
async def host(postgres_server: PostgresServer, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``await host(name)``: a new host's store on the shared log ``name`` (its own copy,
    with every read model, in a file of its own); ``copy=`` reuses a copy's file."""
    databases: dict[str, str] = {}
    opened: list[Any] = []
    hosts = iter(range(1, 1000))

    async def open_(name: str, *, copy: Path | None = None) -> Any:
        if name not in databases:
            databases[name] = await postgres_server.new_database()
        path = copy or tmp_path / f"host{next(hosts)}.sqlite3"
        opened.append(await open_store(path, synchronous="NORMAL", shared_url=databases[name]))
        opened[-1].databases = databases
        return opened[-1]

    yield open_
    for store in opened:
        await store.close()


class TestMirroredLog(postgres_log.TestPostgresLog):
    """The PostgreSQL log's contract, its fixtures (``raw_sql`` and the storm writer work
    on the shared log), with every ``open_log`` a new host reading through its own copy."""

    @pytest.fixture
    async def open_log(self, postgres_server: PostgresServer,
                       databases: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        opened: list[Any] = []
        with tempfile.TemporaryDirectory() as tmp:
            async def open_(name: str) -> Any:
                if name not in databases:
                    databases[name] = await postgres_server.new_database()
                path = Path(tmp) / f"copy{len(opened)}.sqlite3"  # every open: another host
                opened.append(await open_store(path, projections=[], shared_url=databases[name]))
                return opened[-1]

            yield open_
            for log in opened:
                await log.close()


async def _task_on(store: Any, task_id: str, version: int = 1, timeout: float = 5.0) -> Any:
    """The task's view in ``store``'s read models once it is at ``version`` (None: not in
    time)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await store.read_snapshot(lambda db: task_view(db, task_id))
        if view is not None and view.stream_version >= version:
            return view
        if asyncio.get_running_loop().time() > deadline:
            return None
        await asyncio.sleep(0.02)


async def test_each_host_reads_its_own_writes_and_follows_the_others(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    from argus.store.mirror import MirroredStore

    monkeypatch.setattr(MirroredStore, "poll_interval", 60.0)  # only the database's notification is in time
    a, b = await host("log"), await host("log")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    assert await a.read_snapshot(lambda db: task_view(db, "t1")) is not None  # at once: read your writes
    seen = await _task_on(b, "t1")
    assert seen is not None and seen.state.value == "QUEUED"
    await b.append(task_stream("t1"), 1, [f.deferred("t1")])  # b wrote from its own copy's version
    later = await _task_on(a, "t1", version=2)
    assert later is not None and later.state.value == "PENDING_RESOURCES"


async def test_an_event_the_read_models_refuse_never_reaches_the_shared_log(host: Host) -> None:
    a, b = await host("log"), await host("log")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    with pytest.raises(InvariantViolation):  # a queued task cannot succeed
        await a.append(task_stream("t1"), 1, [f.succeeded("t1", 1)])
    assert await a.shared_log.head_position() == 1
    await b.sync()
    assert await b.head_position() == 1


@pytest.mark.parametrize("how", ["page-by-page", "new-copy-in-bulk", "old-copy-in-bulk"])
async def test_a_lost_copy_is_made_again_equal_to_the_others(host: Host, how: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Made page by page (each page folded into the tables), or in bulk: a new copy's rows
    first and its read models built at open, or an existing copy far behind (its read
    models already kept) in one transaction."""
    from argus.store import mirror

    monkeypatch.setattr(mirror, "BULK_COPY", 1_000_000 if how == "page-by-page" else 10)
    a = await host("log")
    for k in range(30):
        await a.append(task_stream(f"t{k}"), 0, [f.submitted(f"t{k}"), f.deferred(f"t{k}")])
    old = None
    if how == "old-copy-in-bulk":  # a copy that exists, with its read models, and is far behind
        old = tmp_path / "old.sqlite3"
        await (await open_store(old)).close()
    fresh = await host("log", copy=old)
    assert await fresh.head_position() == 60

    def dump(store: Any) -> dict[str, Any]:
        db = sqlite3.connect(store.path)
        try:
            return dump_projections(db)
        finally:
            db.close()

    assert dump(fresh) == dump(a)


async def test_while_the_shared_log_is_down_reads_go_on_and_writes_say_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own server (stopped and started again): reads are served from the copy, an
    append is refused as LogUnreachable, and once the database is back the copies take
    writes and follow each other again."""
    from argus.store import LogUnreachable
    from argus.store.mirror import MirroredStore

    monkeypatch.setattr(MirroredStore, "poll_interval", 0.2)  # the follower's retry after an outage
    server = PostgresServer().start()
    stores: list[Any] = []
    try:
        url = await server.new_database()
        for k in range(2):
            stores.append(await open_store(tmp_path / f"c{k}.sqlite3", synchronous="NORMAL", shared_url=url))
        a, b = stores
        await a.append(task_stream("t1"), 0, [f.submitted("t1")])
        server.pause()
        assert await a.read_snapshot(lambda db: task_view(db, "t1")) is not None
        with pytest.raises(LogUnreachable, match="nothing was written"):
            await a.append(task_stream("t2"), 0, [f.submitted("t2")])
        server.resume()
        for _ in range(50):  # the pool's broken connections are replaced as they fail
            try:
                await a.append(task_stream("t2"), 0, [f.submitted("t2")])
                break
            except LogUnreachable:
                await asyncio.sleep(0.1)
        assert await _task_on(b, "t2") is not None
    finally:
        for store in stores:
            await store.close()
        server.stop()


async def test_two_processes_may_share_one_copy(host: Host) -> None:
    """An API and a reactor on one host, with one configuration, copy into one file: each
    copies only what the other has not."""
    a = await host("log")
    b = await host("log", copy=Path(a.path))
    await asyncio.gather(*(store.append(task_stream(f"{name}{k}"), 0, [f.submitted(f"{name}{k}"), f.deferred(f"{name}{k}")])
                           for k in range(15) for name, store in (("a", a), ("b", b))))
    await asyncio.gather(a.sync(), b.sync())
    assert await a.head_position() == await b.head_position() == await a.shared_log.head_position() == 60
    assert await _task_on(a, "b14", version=2) is not None and await _task_on(b, "a14", version=2) is not None


async def test_a_copy_of_another_log_is_refused(host: Host) -> None:
    from argus.store.mirror import NotACopy

    a = await host("one")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    b = await host("two")
    await b.append(task_stream("t2"), 0, [f.submitted("t2"), f.deferred("t2")])
    with pytest.raises(NotACopy, match="not a copy of that log"):
        await host("two", copy=Path(a.path))


async def test_an_unchecked_append_raced_by_another_host_is_judged_at_the_streams_head(host: Host) -> None:
    """An append without an expected version (the reactor's, say) is tried on a copy that
    may be one event behind by the time PostgreSQL takes it. Another host's append lands in
    that gap here: the shared log must not take an event the read models refuse at the
    stream's real head, or no copy could follow it (each would refuse it for ever). As on
    one SQLite host, the append is judged at that head: refused, nothing written."""
    a, b = await host("log"), await host("log")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    await b.sync()
    append_to_shared = b.shared_log.record_prepared

    async def raced(prepared: Any) -> Any:  # a's cancel lands after b's copy said yes
        if await a.shared_log.head_position() == 1:
            await a.append(task_stream("t1"), 1, [f.cancel_requested("t1"), f.canceled("t1")])
        return await append_to_shared(prepared)

    b.shared_log.record_prepared = raced
    with pytest.raises(InvariantViolation):  # a canceled task is never deferred
        await b.append(task_stream("t1"), None, [f.deferred("t1")])
    assert await a.shared_log.head_position() == 3
    for store in (a, b):
        assert await store.sync() == 3
        view = await store.read_snapshot(lambda db: task_view(db, "t1"))
        assert view.state.value == "CANCELED"
    # An unchecked append that is still legal at the head goes through after the race.
    calls = 0

    async def raced_once(prepared: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            await a.append(task_stream("t2"), 1, [f.deferred("t2")])
        return await append_to_shared(prepared)

    await a.append(task_stream("t2"), 0, [f.submitted("t2")])
    await b.sync()
    b.shared_log.record_prepared = raced_once
    await b.append(task_stream("t2"), None, [f.deferred("t2", reason="quota")])
    assert calls == 2  # refused once at PostgreSQL (the version moved), tried again
    assert (await _task_on(a, "t2", version=3)) is not None


async def test_a_token_issued_on_another_host_a_moment_ago_is_known_at_once(
        host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens are checked on each host's copy; a miss asks the shared log before it says
    no, so a user created on one host can call another at once (no notification needed)."""
    import msgspec

    from argus.events import user_stream
    from argus.service.auth import AuthCache, hash_token
    from argus.store.mirror import MirroredStore

    a = await host("log")

    async def follows_nothing(self: MirroredStore) -> None:
        return None

    monkeypatch.setattr(MirroredStore, "_follow", follows_nothing)  # b learns of a's appends only by asking
    b = await host("log")
    cache = AuthCache(b)
    issued = msgspec.structs.replace(f.token_issued("u", "k1"), token_hash=hash_token("s3cret"))
    await a.append(user_stream("u"), 0, [f.user_created("u"), issued])
    assert await b.head_position() == 0
    principal = await cache.lookup("s3cret")
    assert principal is not None and principal.user_id == "u"
    assert await cache.lookup("not-a-token") is None  # still refused


async def test_a_copy_opened_alone_is_refused_saying_how_to_use_it(host: Host) -> None:
    """Written alone, a copy would reach no other host and no longer be a copy (the next
    start on the shared log would refuse it): it is refused at open, nothing written."""
    from argus.store import IsACopy

    a = await host("log")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    with pytest.raises(IsACopy, match=r"copy of the event log shared through PostgreSQL at postgresql://.*v2\.postgres\.url"):
        await open_store(a.path)
    assert await host("log", copy=Path(a.path)) is not None  # as a copy, it opens


async def test_a_copy_that_cannot_take_an_event_says_why_and_refuses_writes(host: Host) -> None:
    """Hosts on one log running different code: an event one host's read models allowed
    and another's refuse. The other host says so (position, why, what to do), keeps its
    reads, and refuses writes with nothing written, rather than failing some other way."""
    from argus.store import LogUnreachable
    from argus.store.mirror import CopyCannotFollow

    a, b = await host("log"), await host("log")
    await a.append(task_stream("t1"), 0, [f.submitted("t1")])
    await b.sync()
    # As a host whose code allowed it would: straight to the shared log, past any copy.
    await a.shared_log.append(task_stream("t1"), 1, [f.succeeded("t1")])
    with pytest.raises(CopyCannotFollow, match=r"positions 2\.\.2 of the shared log: .*same Argus version"):
        await b.sync()
    with pytest.raises(LogUnreachable, match="nothing written"):  # the API's 503
        await b.append(task_stream("t2"), 0, [f.submitted("t2")])
    assert await b.head_position() == 1 and await a.shared_log.head_position() == 2
    view = await b.read_snapshot(lambda db: task_view(db, "t1"))
    assert view.state.value == "QUEUED"  # reads go on from the copy as it was


async def test_a_copy_is_its_owners_alone(host: Host, tmp_path: Path) -> None:
    """A copy holds every user's specs and the tokens' hashes: its file, WAL and shared
    memory are 0600 when made, and an existing copy readable by others is made 0600."""
    import os
    import stat

    store = await host("private")
    await store.append(task_stream("t1"), 0, [f.submitted("t1")])
    files = [Path(store.path), Path(store.path + "-wal"), Path(store.path + "-shm")]
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in files), \
        [oct(os.stat(p).st_mode) for p in files]
    await store.close()
    os.chmod(store.path, 0o644)
    again = await host("private", copy=Path(store.path))
    assert stat.S_IMODE(os.stat(again.path).st_mode) == 0o600
