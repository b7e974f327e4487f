"""Group commit (``argus.store.GroupCommitLog``): concurrent commands from different users
share one transaction, every event keeps the meta (actor, request id) of the request that
caused it, one caller's bad batch fails alone, and one caller's batches stay one unit.
(The log's contract itself: tests/store/test_log_group.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from argus.events import EventMeta, task_stream
from argus.store import (
    AppendBatch,
    ConcurrencyConflict,
    EventStore,
    GroupCommitLog,
    InvariantViolation,
    PayloadTooLarge,
)
from projections import open_store
from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.events import factories as f

ALICE = EventMeta(actor="user:alice", request_id="req-alice")
BOB = EventMeta(actor="user:bob", request_id="req-bob")
CAROL = EventMeta(actor="user:carol", request_id="req-carol")


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """One process's store: its own SQLite log, or its copy of a log shared through
    PostgreSQL (group commit works per process there too: one append to the shared log)."""
    url = ""
    if request.param == "postgres":
        url = await request.getfixturevalue("postgres_server").new_database()
    s = await open_store(tmp_path / "events.sqlite3", synchronous="NORMAL", shared_url=url)
    yield s
    await s.close()


def _submit(task_id: str, user: str = "alice", expected: int | None = 0) -> AppendBatch:
    return AppendBatch(stream=task_stream(task_id), expected_version=expected,
                       events=[f.submitted(task_id, user)], owner=user)


async def test_different_actors_share_one_transaction_and_keep_their_meta(store: EventStore) -> None:
    committer = GroupCommitLog(store)
    before = store.appends_total
    try:
        # gather starts both callers before the worker runs: both are queued for its first take
        got = await asyncio.gather(committer.append_batches([_submit("a", "alice")], meta=ALICE),
                                   committer.append_batches([_submit("b", "bob")], meta=BOB))
    finally:
        await committer.close()
    assert got == [[1], [2]]
    assert store.appends_total - before == 1 and committer.transactions == 1
    recs = await store.read()
    assert [(r.stream, r.meta) for r in recs] == [(task_stream("a"), ALICE), (task_stream("b"), BOB)]
    assert recs[0].recorded_at == recs[1].recorded_at  # one transaction: one timestamp


async def test_a_bad_batch_fails_alone_and_the_others_keep_their_meta(store: EventStore) -> None:
    await store.append(task_stream("taken"), 0, [f.submitted("taken")], owner="alice")
    committer = GroupCommitLog(store)
    huge = f.deferred("taken", reason="x" * (store.max_payload_bytes + 1))
    try:
        got = await asyncio.gather(
            committer.append_batches([_submit("a", "alice")], meta=ALICE),
            committer.append_batches([_submit("taken", "bob")], meta=BOB),  # stream exists: conflict
            committer.append(task_stream("taken"), 1, [f.running("taken")], meta=BOB),  # illegal transition
            committer.append(task_stream("taken"), None, [huge], meta=BOB),  # too large
            committer.append_batches([_submit("c", "carol")], meta=CAROL),
            return_exceptions=True,
        )
    finally:
        await committer.close()
    assert isinstance(got[1], ConcurrencyConflict)
    assert isinstance(got[2], InvariantViolation)
    assert isinstance(got[3], PayloadTooLarge)
    assert got[0] == [2] and got[4] == [3]
    assert committer.transactions == 2  # the group failed whole; each good batch then alone
    recs = await store.read(after=1)
    assert [(r.stream, r.meta) for r in recs] == [(task_stream("a"), ALICE), (task_stream("c"), CAROL)]


async def test_one_callers_batches_commit_together_or_not_at_all(store: EventStore) -> None:
    await store.append(task_stream("taken"), 0, [f.submitted("taken")], owner="alice")
    committer = GroupCommitLog(store)
    try:
        got = await asyncio.gather(
            committer.append_batches([_submit("x", "bob"), _submit("taken", "bob")], meta=BOB),
            committer.append_batches([_submit("a", "alice"), _submit("b", "alice")], meta=ALICE),
            return_exceptions=True,
        )
    finally:
        await committer.close()
    assert isinstance(got[0], ConcurrencyConflict) and got[1] == [2, 3]
    recs = await store.read(after=1)
    assert [(r.stream, r.meta) for r in recs] == [(task_stream("a"), ALICE), (task_stream("b"), ALICE)]


async def test_a_lone_failure_is_the_callers(store: EventStore) -> None:
    await store.append(task_stream("taken"), 0, [f.submitted("taken")])
    committer = GroupCommitLog(store)
    try:
        with pytest.raises(ConcurrencyConflict):
            await committer.append_batches([_submit("taken")], meta=ALICE)
        assert await committer.append_batches([_submit("a")], meta=ALICE) == [2]  # the worker lives on
    finally:
        await committer.close()


async def test_two_users_submissions_over_http_share_one_transaction(
    live: Env, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the API: alice's and bob's concurrent submissions are one transaction, and
    each TaskSubmitted carries its own request's actor and X-Request-Id. (Behind uvicorn:
    the server shares this test's event loop, so the test can hold the committer.)"""
    env = live
    for user in ("alice", "bob"):
        put_dataset(env.shared, user)
    store, committer = env.store, env.app.state.commands.log
    real, gate = store.record_batches, asyncio.Event()
    calls: list[list[EventMeta | None]] = []

    async def gated(batches: list[AppendBatch], **kw: Any) -> Any:
        calls.append([b.meta for b in batches])
        if len(calls) == 1:
            await gate.wait()  # hold the worker so that both submissions queue behind it
        return await real(batches, **kw)

    monkeypatch.setattr(store, "record_batches", gated)
    before = store.appends_total
    blocker = asyncio.create_task(committer.append("task-blocker", None, [], meta=EventMeta()))
    posts = [asyncio.create_task(env.client.post(
        "/api/v2/tasks", content=ADVANCED,
        headers={**env.h(u), "Content-Type": "application/yaml", "X-Request-Id": f"req-{u}"},
    )) for u in ("alice", "bob")]
    async with asyncio.timeout(10):
        while committer.pending < 2:
            await asyncio.sleep(0.005)
    gate.set()
    responses = await asyncio.gather(*posts)
    await blocker
    assert [r.status_code for r in responses] == [201, 201], [r.text for r in responses]
    assert store.appends_total - before == 2  # the blocker's, then one for both submissions
    assert sorted(m.actor for m in calls[1] if m) == ["user:alice", "user:bob"]
    recs = {r.event.task_id: r for r in await store.read(types=["TaskSubmitted"])}
    a, b = (recs[r.json()["task_id"]] for r in responses)
    assert a.meta == ALICE and a.owner == "alice"
    assert b.meta == BOB and b.owner == "bob"
    assert abs(a.position - b.position) == 1 and a.recorded_at == b.recorded_at


async def test_a_taken_task_id_is_replaced_and_the_command_names_the_new_one(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A basic task's command names its task id (``trainer.experiment_name``): when the id
    turns out to be taken at append time, the task is prepared again under the new id."""
    import argus.service.commands as commands

    # $HOME/common/datasets/... is <shared>/datasets/... (the files must exist to submit).
    for path in ("users/alice/datasets/gsm8k/train.parquet", "datasets/gsm8k/test.parquet"):
        (env.shared / path).parent.mkdir(parents=True, exist_ok=True)
        (env.shared / path).write_bytes(b"PAR1")
    await env.store.append(task_stream("alice-ppo-taken"), 0, [f.submitted("alice-ppo-taken")], owner="alice")
    ids = iter(["alice-ppo-taken", "alice-ppo-fresh"])
    monkeypatch.setattr(commands, "new_task_id", lambda user, workload: next(ids))
    doc = {"workload": "ppo", "nnodes": 1, "n_gpus_per_node": 1, "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
           "train_file": "$HOME/datasets/gsm8k/train.parquet", "val_file": "$HOME/common/datasets/gsm8k/test.parquet"}
    r = await env.client.post("/api/v2/tasks", json=doc, headers=env.h("alice"))
    assert r.status_code == 201, r.text
    assert r.json()["task_id"] == "alice-ppo-fresh"
    [rec] = await env.store.read_stream(task_stream("alice-ppo-fresh"))
    assert "trainer.experiment_name=alice-ppo-fresh" in rec.event.command
    assert "alice-ppo-taken" not in rec.event.command
