"""The event log's contract, for every backend (SQLite's ``EventStore`` keeping no
projections, ``PostgresEventLog``), in the style of ``eventsourcing``'s recorder tests: a
backend subclasses ``EventLogContract`` and provides three fixtures:

- ``open_log``: ``await open_log(name)`` opens (or reopens) the log named ``name``; what it
  opened is closed at the end;
- ``raw_sql``: ``await raw_sql(name, sql)`` runs one statement on that log's database
  outside the log's code (to show the database itself refuses what breaks append-only);
- ``storm_target``: ``storm_target(name)``, what ``tests.store.procs storm`` opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from typing import Any, Awaitable, Callable

import msgspec
import pytest

from argus.events import EventMeta, reactor_stream, task_stream
from argus.store import AppendBatch, ConcurrencyConflict, EventLog, InvalidEvent, PayloadTooLarge
from tests.events import factories as f
from tests.store.contract import leader
from tests.store.procs import child_command, child_env, kill_mid_storm, task_batch

OpenLog = Callable[..., Awaitable[EventLog]]
RawSql = Callable[[str, str], Awaitable[None]]


class EventLogContract:
    """What every event log backend must do (``argus.store.EventLog``)."""

    async def test_it_is_an_event_log(self, open_log: OpenLog) -> None:
        assert isinstance(await open_log("p"), EventLog)

    async def test_appends_read_back_in_order_with_versions_per_stream(self, open_log: OpenLog) -> None:
        log = await open_log("a")
        assert await log.head_position() == 0
        assert await log.append(task_stream("x"), 0, [f.submitted("x"), f.deferred("x")], owner="alice") == [1, 2]
        assert await log.append_batches([
            AppendBatch(stream=task_stream("y"), expected_version=0, events=[f.submitted("y")], owner="bob"),
            AppendBatch(stream=task_stream("x"), expected_version=2, events=[f.starting("x")], owner="alice"),
        ], meta=EventMeta(actor="reactor", request_id="r1")) == [3, 4]
        got = await log.read()
        assert [(r.position, r.stream, r.version, r.type, r.owner) for r in got] == [
            (1, "task-x", 1, "TaskSubmitted", "alice"), (2, "task-x", 2, "TaskDeferred", "alice"),
            (3, "task-y", 1, "TaskSubmitted", "bob"), (4, "task-x", 3, "AttemptStarting", "alice")]
        assert got[2].meta.actor == "reactor" and got[2].meta.request_id == "r1"
        assert got[0].event == f.submitted("x")
        assert [r.position for r in await log.read_stream(task_stream("x"))] == [1, 2, 4]
        assert [r.version for r in await log.read_stream(task_stream("x"), after_version=1)] == [2, 3]
        assert await log.stream_version(task_stream("x")) == 3 and await log.stream_version("nothing") == 0
        assert await log.head_position() == 4

    async def test_reads_filter_by_stream_type_owner_and_bound(self, open_log: OpenLog) -> None:
        log = await open_log("a")
        for name, owner in (("p", "alice"), ("q", "bob"), ("r", "alice")):
            await log.append(task_stream(name), 0, [f.submitted(name), f.deferred(name)], owner=owner)
        assert [r.position for r in await log.read(after=2, limit=2)] == [3, 4]
        assert [r.position for r in await log.read(streams=[task_stream("q"), task_stream("r")])] == [3, 4, 5, 6]
        assert [r.position for r in await log.read(types=["TaskDeferred"])] == [2, 4, 6]
        assert [r.position for r in await log.read(owner="alice", until=5)] == [1, 2, 5]

    async def test_a_conflict_anywhere_writes_nothing(self, open_log: OpenLog) -> None:
        log = await open_log("a")
        await log.append(task_stream("x"), 0, [f.submitted("x")])
        with pytest.raises(ConcurrencyConflict):
            await log.append_batches([
                AppendBatch(stream=task_stream("y"), expected_version=0, events=[f.submitted("y")]),
                AppendBatch(stream=task_stream("x"), expected_version=0, events=[f.deferred("x")]),  # is at 1
            ])
        assert await log.head_position() == 1 and await log.stream_version(task_stream("y")) == 0
        # None: no check; the event follows the stream's current version.
        assert await log.append(task_stream("x"), None, [f.deferred("x")]) == [2]

    async def test_bad_events_are_refused_before_anything_is_written(self, open_log: OpenLog) -> None:
        log = await open_log("a")
        with pytest.raises(PayloadTooLarge):
            await log.append(task_stream("x"), 0, [f.deferred("x", reason="r" * (2 << 20))])
        bad = msgspec.structs.replace(f.deferred("x"), task_id=123)  # would encode, and never decode
        with pytest.raises(InvalidEvent):
            await log.append(task_stream("x"), 0, [f.submitted("x"), bad])
        assert await log.head_position() == 0

    async def test_the_database_refuses_to_change_or_remove_events(self, open_log: OpenLog, raw_sql: RawSql) -> None:
        log = await open_log("a")
        await log.append(task_stream("x"), 0, [f.submitted("x"), f.deferred("x")])
        for sql in ("UPDATE events SET owner = 'mallory' WHERE position = 1",
                    "DELETE FROM events WHERE position = 2",
                    # a row in the past, or leaving a gap: not after the head
                    "INSERT INTO events (position, stream, version, type, schema_version, data, meta, owner, "
                    "recorded_at) SELECT 7, stream, 9, type, schema_version, data, meta, owner, recorded_at "
                    "FROM events WHERE position = 1"):
            with pytest.raises(Exception, match="append-only"):
                await raw_sql("a", sql)
        assert [(r.position, r.owner) for r in await log.read()] == [(1, None), (2, None)]

    async def test_two_writers_at_once_lose_nothing_and_do_not_interleave(self, open_log: OpenLog) -> None:
        first, second = await open_log("a"), await open_log("a")  # two connections to one log
        size, rounds = 5, 30

        async def write(log: Any, name: str) -> None:
            for n in range(rounds):
                await log.append(task_stream(name), n * size, task_batch(name, n == 0, size, n))

        await asyncio.gather(write(first, "one"), write(second, "two"))
        got = await first.read(limit=10_000)
        assert [r.position for r in got] == list(range(1, 2 * rounds * size + 1))  # gapless
        for name in ("one", "two"):
            mine = [r.position for r in got if r.stream == task_stream(name)]
            for n in range(rounds):
                block = mine[n * size:(n + 1) * size]
                assert block == list(range(block[0], block[0] + size)), f"a transaction of {name} interleaved"

    async def test_a_subscriber_catches_up_then_follows_another_connections_appends(self, open_log: OpenLog) -> None:
        reader, writer = await open_log("a"), await open_log("a")
        await writer.append(task_stream("x"), 0, [f.submitted("x")])
        seen = await follow_appends(reader, writer, count=6, poll_interval=0.05)
        assert seen == [1, 2, 3, 4, 5, 6]

    # ------------------------------------------ leases (the reactor's leadership)
    async def test_lease_refuses_a_second_holder_until_expiry(self, open_log: OpenLog) -> None:
        store = await open_log("a")
        ttl = 0.4
        assert await store.claim_lease("reactor", "r1", ttl)
        assert not await store.claim_lease("reactor", "r2", ttl)
        assert await store.claim_lease("reactor", "r1", ttl)  # renewal by the holder
        assert not await store.claim_lease("reactor", "r2", ttl)
        await asyncio.sleep(ttl + 0.1)
        assert await store.claim_lease("reactor", "r2", ttl)
        assert not await store.claim_lease("reactor", "r1", ttl)

    async def test_released_lease_can_be_taken_at_once(self, open_log: OpenLog) -> None:
        store = await open_log("a")
        assert await store.claim_lease("reactor", "r1", 60)
        await store.release_lease("reactor", "r2")  # not the holder: no effect
        assert not await store.claim_lease("reactor", "r2", 60)
        await store.release_lease("reactor", "r1")
        assert await store.claim_lease("reactor", "r2", 60)

    async def test_new_leader_event_is_appended_once_per_change_of_holder(self, open_log: OpenLog) -> None:
        store = await open_log("a")
        def on_new(rid: str) -> AppendBatch:
            return AppendBatch(stream=reactor_stream, expected_version=None, events=[leader(rid)])

        assert await store.claim_lease("reactor", "r1", 0.3, on_new_leader=on_new("r1"))
        assert await store.claim_lease("reactor", "r1", 0.3, on_new_leader=on_new("r1"))
        assert not await store.claim_lease("reactor", "r2", 0.3, on_new_leader=on_new("r2"))
        await asyncio.sleep(0.4)
        assert await store.claim_lease("reactor", "r2", 0.3, on_new_leader=on_new("r2"))
        records = await store.read_stream(reactor_stream)
        assert [r.event.reactor_id for r in records] == ["r1", "r2"]  # type: ignore[attr-defined]

    async def test_failed_new_leader_append_leaves_the_lease_unclaimed(self, open_log: OpenLog) -> None:
        store = await open_log("a")
        stale = AppendBatch(stream=reactor_stream, expected_version=5, events=[leader("r1")])
        with pytest.raises(ConcurrencyConflict):
            await store.claim_lease("reactor", "r1", 60, on_new_leader=stale)
        assert await store.claim_lease("reactor", "r2", 60)
        assert await store.head_position() == 0

    async def test_a_writer_killed_mid_storm_leaves_only_whole_transactions(
            self, open_log: OpenLog, storm_target: Callable[[str], str]) -> None:
        log = await open_log("a")
        pairs, size = 4, 5
        child = subprocess.Popen(child_command("storm", storm_target("a"), "FULL", pairs, size), env=child_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await kill_mid_storm(child, log.head_position, 400)
        again = await open_log("a")
        got = await again.read(limit=1_000_000)
        assert len(got) >= 400 and [r.position for r in got] == list(range(1, len(got) + 1))
        for k in range(pairs):  # both streams of a pair are written by the same transactions
            a = [r.version for r in got if r.stream == task_stream(f"p{k}-a")]
            b = [r.version for r in got if r.stream == task_stream(f"p{k}-b")]
            assert a == b == list(range(1, len(a) + 1)) and len(a) % size == 0, (k, len(a), len(b))
        assert await again.append(task_stream("after"), 0, [f.submitted("after")]) == [len(got) + 1]


async def follow_appends(reader: Any, writer: Any, *, count: int, poll_interval: float, timeout: float = 10.0) -> list[int]:
    """Subscribe on ``reader`` from the start while ``writer`` appends to task-x until
    ``count`` events exist; the positions the subscriber saw, in order."""
    seen: list[int] = []

    async def follow() -> None:
        async with contextlib.aclosing(reader.subscribe(0, poll_interval=poll_interval)) as events:
            async for rec in events:
                seen.append(rec.position)
                if len(seen) == count:
                    return

    task = asyncio.create_task(follow())
    for version in range(await writer.stream_version(task_stream("x")), count):
        await asyncio.sleep(0.05)
        await writer.append(task_stream("x"), version, [f.deferred("x", reason=f"r{version}")])
    await asyncio.wait_for(task, timeout)
    return seen
