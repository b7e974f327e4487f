"""The event store's contract, as a reusable test class (in the style of ``eventsourcing``'s
recorder tests). A backend runs it by subclassing ``EventStoreContract`` and providing the
``store_factory`` fixture: ``await store_factory(name)`` opens (or reopens) the store named
``name``; the factory closes what it opened. Only the store's public API is used here."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Awaitable, Protocol

import pytest

from argus.events import EventMeta, ReactorLeaderElected, task_stream, user_stream
from argus.store import (
    AppendBatch,
    ConcurrencyConflict,
    EventStore,
    InvariantViolation,
    PayloadTooLarge,
)
from argus.lifecycle import TaskState
from projections.tasks_read import all_tasks
from tests.events import factories as f
from tests.support.sql import rows


async def tasks(store: EventStore) -> list[tuple[str, str, int]]:
    """(task_id, state, stream_version) of every task, as the ``tasks`` projection holds them."""
    return [(v.task_id, v.state.value, v.stream_version) for v in await store.read_snapshot(all_tasks)]


class StoreFactory(Protocol):
    def __call__(self, name: str = "events", **options: object) -> Awaitable[EventStore]: ...


async def positions_seen(store: EventStore, expected: int, *, after: int = 0, timeout: float = 20.0) -> list[int]:
    """Subscribe from ``after`` until ``expected`` events have arrived; their positions."""
    seen: list[int] = []

    async def run() -> None:
        async with contextlib.aclosing(store.subscribe(after, poll_interval=0.02)) as events:
            async for rec in events:
                seen.append(rec.position)
                if len(seen) >= expected:
                    return

    await asyncio.wait_for(run(), timeout)
    return seen


def leader(reactor_id: str) -> ReactorLeaderElected:
    return ReactorLeaderElected(reactor_id=reactor_id, host="node-a", pid=1, lease_until=0.0, elected_at=f.T0)


class EventStoreContract:
    """What every event store backend must do. Subclasses provide ``store_factory``."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        raise NotImplementedError("a backend's test class provides store_factory")

    @pytest.fixture
    async def store(self, store_factory: StoreFactory) -> EventStore:
        return await store_factory()

    # ---------------------------------------------------------------- positions and versions
    async def test_empty_store(self, store: EventStore) -> None:
        assert await store.head_position() == 0
        assert await store.read() == []
        assert await store.stream_version(task_stream("none")) == 0

    async def test_positions_are_gapless_and_strictly_increasing(self, store: EventStore) -> None:
        returned: list[int] = []
        for i in range(20):
            tid = f"t{i}"
            returned += await store.append(task_stream(tid), 0, [f.submitted(tid)])
            if i % 2:
                returned += await store.append(task_stream(tid), 1, [f.deferred(tid), f.starting(tid)])
        records = await store.read(limit=10_000)
        assert [r.position for r in records] == list(range(1, 41))
        assert returned == list(range(1, 41))
        assert await store.head_position() == 40

    async def test_stream_versions_count_from_one(self, store: EventStore) -> None:
        s = task_stream("a")
        await store.append(s, 0, [f.submitted("a"), f.deferred("a")])
        await store.append(s, 2, [f.starting("a")])
        assert [r.version for r in await store.read_stream(s)] == [1, 2, 3]
        assert [r.version for r in await store.read_stream(s, after_version=1)] == [2, 3]
        assert await store.stream_version(s) == 3

    async def test_read_back_equals_what_was_appended(self, store: EventStore) -> None:
        events = f.happy_path("a")
        meta = EventMeta(actor="user:alice", request_id="req-1")
        await store.append(task_stream("a"), 0, events, owner="alice", meta=meta)
        records = await store.read()
        assert [r.event for r in records] == events
        assert {(r.stream, r.owner, r.meta) for r in records} == {(task_stream("a"), "alice", meta)}
        assert [r.type for r in records] == [type(e).__name__ for e in events]

    async def test_read_filters(self, store: EventStore) -> None:
        await store.append(task_stream("a"), 0, [f.submitted("a")], owner="alice")
        await store.append(task_stream("b"), 0, [f.submitted("b", "bob")], owner="bob")
        await store.append(task_stream("a"), 1, [f.deferred("a")], owner="alice")
        await store.append(user_stream("carol"), 0, [f.user_created("carol")])
        assert [r.position for r in await store.read(owner="alice")] == [1, 3]
        assert [r.position for r in await store.read(streams=[task_stream("b")])] == [2]
        assert [r.position for r in await store.read(types=["TaskDeferred", "UserCreated"])] == [3, 4]
        assert [r.position for r in await store.read(after=1, until=3)] == [2, 3]
        assert [r.position for r in await store.read(limit=2)] == [1, 2]

    # ---------------------------------------------------------------- optimistic concurrency
    async def test_wrong_expected_version_conflicts_and_writes_nothing(self, store: EventStore) -> None:
        s = task_stream("a")
        await store.append(s, 0, [f.submitted("a")])
        for expected in (0, 2, 7):
            with pytest.raises(ConcurrencyConflict) as info:
                await store.append(s, expected, [f.deferred("a")])
            assert (info.value.stream, info.value.expected, info.value.actual) == (s, expected, 1)
        assert await store.head_position() == 1
        assert await store.stream_version(s) == 1

    async def test_expected_version_none_appends_without_a_check(self, store: EventStore) -> None:
        s = task_stream("a")
        await store.append(s, None, [f.submitted("a")])
        await store.append(s, None, [f.deferred("a")])
        assert await store.stream_version(s) == 2

    async def test_racing_appends_to_one_stream_one_wins(self, store: EventStore) -> None:
        s = task_stream("a")
        await store.append(s, 0, [f.submitted("a")])
        results = await asyncio.gather(
            *(store.append(s, 1, [f.deferred("a", reason=f"r{i}")]) for i in range(10)),
            return_exceptions=True,
        )
        assert sum(isinstance(r, list) for r in results) == 1
        assert sum(isinstance(r, ConcurrencyConflict) for r in results) == 9
        assert await store.stream_version(s) == 2

    async def test_multi_stream_append_is_all_or_nothing(self, store: EventStore) -> None:
        await store.append(task_stream("b"), 0, [f.submitted("b")])
        batches = [
            AppendBatch(stream=task_stream("a"), expected_version=0, events=[f.submitted("a")]),
            AppendBatch(stream=task_stream("b"), expected_version=0, events=[f.deferred("b")]),
        ]
        with pytest.raises(ConcurrencyConflict):
            await store.append_batches(batches)
        assert await store.head_position() == 1
        assert [t[0] for t in await tasks(store)] == ["b"]
        positions = await store.append_batches(
            [batches[0], AppendBatch(stream=task_stream("b"), expected_version=1, events=[f.deferred("b")])]
        )
        assert positions == [2, 3]

    async def test_batches_for_one_stream_in_one_append_follow_each_other(self, store: EventStore) -> None:
        """Group commit puts several commands for one stream in one transaction: the second
        batch is checked against the version the first one left."""
        s = task_stream("a")
        positions = await store.append_batches([
            AppendBatch(stream=s, expected_version=0, events=[f.submitted("a")]),
            AppendBatch(stream=s, expected_version=1, events=[f.deferred("a"), f.cancel_requested("a")]),
        ])
        assert positions == [1, 2, 3]
        assert [r.version for r in await store.read_stream(s)] == [1, 2, 3]
        assert [t[1:] for t in await tasks(store)] == [("CANCELING", 3)]
        with pytest.raises(ConcurrencyConflict):
            await store.append_batches([
                AppendBatch(stream=s, expected_version=3, events=[f.canceled("a")]),
                AppendBatch(stream=s, expected_version=3, events=[f.canceled("a")]),
            ])
        assert await store.head_position() == 3

    async def test_each_batch_keeps_its_own_meta(self, store: EventStore) -> None:
        alice, bob = EventMeta(actor="user:alice", request_id="r1"), EventMeta(actor="user:bob", request_id="r2")
        await store.append_batches([
            AppendBatch(stream=task_stream("a"), expected_version=0, events=[f.submitted("a")], meta=alice),
            AppendBatch(stream=task_stream("b"), expected_version=0, events=[f.submitted("b")], meta=bob),
            AppendBatch(stream=task_stream("c"), expected_version=0, events=[f.submitted("c")]),
        ], meta=EventMeta(actor="system", request_id="default"))
        assert [r.meta for r in await store.read()] == [
            alice, bob, EventMeta(actor="system", request_id="default"),
        ]

    # ---------------------------------------------------------------- bad input
    async def test_oversized_payload_is_refused_whole(self, store: EventStore) -> None:
        huge = f.deferred("a", reason="x" * (store.max_payload_bytes + 1))
        with pytest.raises(PayloadTooLarge) as info:
            await store.append(task_stream("a"), 0, [f.submitted("a"), huge])
        assert info.value.limit == store.max_payload_bytes and info.value.size > info.value.limit
        assert await store.head_position() == 0
        assert await tasks(store) == []

    async def test_illegal_transition_is_refused_whole(self, store: EventStore) -> None:
        s = task_stream("a")
        await store.append(s, 0, [f.submitted("a")])
        with pytest.raises(InvariantViolation):
            # AttemptRunning is legal after AttemptStarting, TaskSucceeded is not in QUEUED.
            await store.append(s, 1, [f.deferred("a"), f.succeeded("a")])
        with pytest.raises(InvariantViolation):
            await store.append(task_stream("ghost"), 0, [f.deferred("ghost")])
        assert await store.head_position() == 1
        assert [t[1:] for t in await tasks(store)] == [("QUEUED", 1)]
        assert await rows(store, "SELECT user, state, n FROM user_task_counts") == [("alice", "QUEUED", 1)]

    async def test_user_invariants_are_refused(self, store: EventStore) -> None:
        await store.append(user_stream("u"), 0, [f.user_created("u"), f.token_issued("u", "k1")])
        for bad in (f.user_created("u"), f.token_revoked("u", "not-a-token")):
            with pytest.raises(InvariantViolation):
                await store.append(user_stream("u"), 2, [bad])
        with pytest.raises(InvariantViolation):
            await store.append(user_stream("nobody"), 0, [f.user_disabled("nobody")])
        assert await store.head_position() == 2

    # ---------------------------------------------------------------- projections inline
    async def test_projections_follow_appends(self, store: EventStore) -> None:
        await store.append(task_stream("a"), 0, f.happy_path("a"))
        await store.append(task_stream("b"), 0, [f.submitted("b", "bob"), f.deferred("b")])
        assert await rows(store, "SELECT task_id, state, latest_attempt_no FROM tasks ORDER BY task_id") == [
            ("a", "SUCCEEDED", 1), ("b", "PENDING_RESOURCES", 0),
        ]
        assert await rows(store, "SELECT task_id, waiting, wait_reason FROM queue") == [
            ("b", 1, "no_capacity_per_node"),
        ]
        assert await rows(store, "SELECT user, state, n FROM user_task_counts ORDER BY user") == [
            ("alice", TaskState.SUCCEEDED.value, 1), ("bob", "PENDING_RESOURCES", 1),
        ]
        assert await rows(store, "SELECT ray_status, exit_code FROM attempts") == [("SUCCEEDED", 0)]

    async def test_projections_survive_reopen(self, store_factory: StoreFactory) -> None:
        store = await store_factory("reopen")
        await store.append(task_stream("a"), 0, [f.submitted("a"), f.deferred("a")])
        before = await rows(store, "SELECT * FROM tasks")
        await store.close()
        again = await store_factory("reopen")
        assert await rows(again, "SELECT * FROM tasks") == before
        assert await again.head_position() == 2

    # ---------------------------------------------------------------- subscriptions
    async def test_subscribers_before_during_and_after_a_burst_see_each_event_once_in_order(
        self, store: EventStore
    ) -> None:
        n_tasks, total = 60, 60 * 4
        early = asyncio.create_task(positions_seen(store, total))
        await asyncio.sleep(0.01)
        during: asyncio.Task[list[int]] | None = None
        for i in range(n_tasks):
            tid = f"t{i}"
            await store.append(task_stream(tid), 0, [f.submitted(tid)])
            await store.append(task_stream(tid), 1, [f.deferred(tid), f.starting(tid), f.attempt_submitted(tid)])
            if i == n_tasks // 2:
                during = asyncio.create_task(positions_seen(store, total))
            await asyncio.sleep(0)
        late = await positions_seen(store, total)
        assert during is not None
        expected = list(range(1, total + 1))
        assert await early == expected
        assert await during == expected
        assert late == expected
        # A subscriber resumes after its checkpoint: it sees only what follows.
        assert await positions_seen(store, 10, after=total - 10) == expected[-10:]

    async def test_subscriber_filters_by_type(self, store: EventStore) -> None:
        await store.append(task_stream("a"), 0, f.happy_path("a"))

        async def first_two() -> list[str]:
            out: list[str] = []
            async with contextlib.aclosing(store.subscribe(types=["AttemptRunning", "TaskSucceeded"])) as events:
                async for rec in events:
                    out.append(rec.type)
                    if len(out) == 2:
                        return out
            return out

        assert await asyncio.wait_for(first_two(), 5) == ["AttemptRunning", "TaskSucceeded"]

    # ---------------------------------------------------------------- consumer checkpoints
    async def test_checkpoints_never_move_backwards(self, store: EventStore) -> None:
        assert await store.checkpoint("reactor") == 0
        await store.append(task_stream("a"), 0, [f.submitted("a")], checkpoint=("reactor", 5))
        assert await store.checkpoint("reactor") == 5
        await store.append(task_stream("a"), 1, [f.deferred("a")], checkpoint=("reactor", 3))
        assert await store.checkpoint("reactor") == 5
        await store.append_batches([], checkpoint=("reactor", 9))  # a checkpoint alone
        assert await store.checkpoint("reactor") == 9
        await store.append_batches([], checkpoint=("reactor", 0))
        assert await store.checkpoint("reactor") == 9
        assert await store.checkpoint("other") == 0

    async def test_checkpoint_is_not_written_when_the_append_fails(self, store: EventStore) -> None:
        await store.append(task_stream("a"), 0, [f.submitted("a")], checkpoint=("reactor", 1))
        with pytest.raises(ConcurrencyConflict):
            await store.append(task_stream("a"), 0, [f.deferred("a")], checkpoint=("reactor", 2))
        assert await store.checkpoint("reactor") == 1

