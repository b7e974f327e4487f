"""Properties over random interleavings of task lifecycles appended through EventStore:
``verify`` passes, and ``at`` at every position equals what the live read models showed."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from argus.events import (
    AttemptEnded, AttemptRunning, AttemptSubmitted, EventBase, EventMeta, FailureKind,
    RetryScheduled, TaskCanceled, TaskCancelRequested, TaskDeferred, TaskFailed, TaskSucceeded,
    task_stream,
)
from argus.replay import verify, world_at
from argus.store import EventStore
from projections import open_store
from tests.replay.scenario import OWNERS, T0, Capture, _demand, _sid, _starting, _submitted, capture

PATHS = ("succeed", "retry", "fail", "cancel_waiting", "cancel_running", "wait")


def lifecycle(tid: str, path: str, priority: int) -> list[EventBase]:
    t, d = T0, _demand(1, 4)
    out: list[EventBase] = [_submitted(tid, "ppo", d, t, priority=priority, user="u")]
    defer = TaskDeferred(task_id=tid, reason="no_capacity_per_node", message="full", needed=d,
                         free_gpus_per_node=[2.0], decided_at=t + 1)
    if path in ("wait", "cancel_waiting"):
        out.append(defer)
        if path == "cancel_waiting":
            out += [TaskCancelRequested(task_id=tid, by="x", requested_at=t + 2),
                    TaskCanceled(task_id=tid, by="x", canceled_at=t + 3)]
        return out
    attempt = 1

    def run(n: int) -> list[EventBase]:
        return [_starting(tid, n, t + 2), AttemptSubmitted(task_id=tid, attempt_no=n, submission_id=_sid(tid, n),
                                                           submitted_at=t + 3),
                AttemptRunning(task_id=tid, attempt_no=n, submission_id=_sid(tid, n), started_at=t + 4)]

    out += run(attempt)
    if path == "retry":
        out += [AttemptEnded(task_id=tid, attempt_no=1, submission_id=_sid(tid, 1), ray_status="FAILED",
                             failure_kind=FailureKind.INSUFFICIENT_RESOURCES, ended_at=t + 5),
                RetryScheduled(task_id=tid, failed_attempt_no=1, failure_kind=FailureKind.INSUFFICIENT_RESOURCES,
                               next_run_at=t + 65, delay_s=60.0), defer]
        attempt = 2
        out += run(attempt)
    if path == "cancel_running":
        return out + [TaskCancelRequested(task_id=tid, by="x", requested_at=t + 9),
                      AttemptEnded(task_id=tid, attempt_no=attempt, submission_id=_sid(tid, attempt),
                                   ray_status="STOPPED", failure_kind=FailureKind.CANCELED, ended_at=t + 10),
                      TaskCanceled(task_id=tid, by="x", ray_status="STOPPED", canceled_at=t + 10)]
    ok = path != "fail"
    out.append(AttemptEnded(task_id=tid, attempt_no=attempt, submission_id=_sid(tid, attempt),
                            ray_status="SUCCEEDED" if ok else "FAILED", exit_code=0 if ok else 1,
                            failure_kind=None if ok else FailureKind.RUNTIME_ERROR, ended_at=t + 20))
    if ok:
        return out + [TaskSucceeded(task_id=tid, attempt_no=attempt, finished_at=t + 20)]
    return out + [TaskFailed(task_id=tid, attempt_no=attempt, failure_kind=FailureKind.RUNTIME_ERROR,
                             error_summary="boom", finished_at=t + 20)]


async def _append_all(db: Path, plans: list[tuple[str, list[EventBase]]], order: list[int]) -> list[Capture]:
    store = await open_store(db, synchronous="OFF")
    cursors = [0] * len(plans)
    captures = []
    try:
        for pick in order:
            live = [i for i, (_, evs) in enumerate(plans) if cursors[i] < len(evs)]
            i = live[pick % len(live)]
            tid, events = plans[i]
            await store.append(task_stream(tid), None, [events[cursors[i]]], owner=OWNERS.get(tid, "u"),
                               meta=EventMeta(actor="reactor:p"))
            cursors[i] += 1
            captures.append(capture(db))
    finally:
        await store.close()
    return captures


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    paths=st.lists(st.tuples(st.sampled_from(PATHS), st.integers(0, 2)), min_size=1, max_size=4),
    seed=st.lists(st.integers(0, 7), min_size=60, max_size=60),
)
def test_at_every_position_matches_the_live_read_models(paths: list[tuple[str, int]], seed: list[int]) -> None:
    plans = [(f"u-ppo-20260105-100000-{i:04x}", lifecycle(f"u-ppo-20260105-100000-{i:04x}", p, prio))
             for i, (p, prio) in enumerate(paths)]
    total = sum(len(evs) for _, evs in plans)
    order = (seed * (total // len(seed) + 1))[:total]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "p.sqlite3"
        captures = asyncio.run(_append_all(db, plans, order))
        assert verify(db).ok
        for cap in captures:
            world = world_at(db, cap.position)
            assert {t.task_id: t.state for t in world.tasks} == cap.states
            assert [(q.task_id, q.wait_reason) for q in world.queue] == cap.queue
