"""A realistic recorded log for the replay tests, appended through the real EventStore.

Five tasks follow the lifecycle as the API and the reactor would record it:
- A (alice) waited for resources (no_capacity_per_node, free [4, 2]) 42 s, then succeeded;
- B (bob) failed INSUFFICIENT_RESOURCES on attempt 1, was retried after 60 s, succeeded;
- C (alice) was deferred while Ray was unreachable and canceled before it ran;
- D (bob) failed USER_ERROR (not retried);
- E (alice) still waits at the end of the log.
After every append the live read models are captured the way the API reads them, so the
tests can check that ``at <position>`` reproduces what was visible at that moment.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from argus.events import (
    AttemptEnded, AttemptRunning, AttemptStarting, AttemptSubmitted, CapacityObserved,
    ClusterUnreachable, Demand, EventBase, EventMeta, FailureKind, NodeCapacity,
    RetryScheduled, SubmissionPayload, TaskCanceled, TaskCancelRequested, TaskDeferred,
    TaskFailed, TaskSubmitted, TaskSucceeded, TokenIssued, UserCreated, cluster_stream,
    task_stream, user_stream,
)
from argus.store import EventStore
from projections import open_store

T0 = dt.datetime(2026, 1, 5, 10, 0, 0, tzinfo=dt.timezone.utc).timestamp()
A = "alice-ppo-20260105-100004-aaaa"
B = "bob-grpo-20260105-100001-bbbb"
C = "alice-sft-20260105-100014-cccc"
D = "bob-ppo-20260105-100030-dddd"
E = "alice-grpo-20260105-101140-eeee"
OWNERS: dict[str, str] = {A: "alice", B: "bob", C: "alice", D: "bob", E: "alice"}
EVIDENCE = "Total available GPUs 4 is less than total desired GPUs 8"
USER_EVIDENCE = "ModuleNotFoundError: No module named 'reward_fn'"


class Capture(msgspec.Struct, frozen=True):
    """What the API showed right after an append."""

    position: int
    recorded_at: float
    states: dict[str, str]
    queue: list[tuple[str, str | None]]  # (task_id, wait_reason) in the order shown
    free_gpus: dict[str, float]


class Scenario(msgspec.Struct, frozen=True):
    db: Path
    captures: list[Capture]


def _demand(nnodes: int, gpus: int) -> Demand:
    return Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=float(gpus * 2))


def _nodes(*free: float) -> list[NodeCapacity]:
    return [
        NodeCapacity(node_id=f"n{i}", ip=f"10.0.0.{i}", total_gpus=4.0, free_gpus=f,
                     total_cpus=32.0, free_cpus=32.0 - 2 * (4 - f))
        for i, f in enumerate(free, start=1)
    ]


def _submitted(task_id: str, workload: str, demand: Demand, at: float, priority: int = 0,
               user: str | None = None) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=task_id, user=user or OWNERS[task_id], workload=workload, kind="basic",
        spec_raw=f"workload: {workload}\n", spec={"workload": workload}, command_raw="python -m verl",
        command="python -m verl", demand=demand, priority=priority, submitted_at=at,
    )


def _starting(task_id: str, n: int, at: float) -> AttemptStarting:
    sid = f"{task_id}--a{n:02d}"
    payload = SubmissionPayload(submission_id=sid, entrypoint="python -m verl", entrypoint_num_cpus=1.0,
                                entrypoint_resources={"worker_node": 1.0}, runtime_env={}, metadata={})
    return AttemptStarting(task_id=task_id, attempt_no=n, submission_id=sid, payload=payload, decided_at=at)


def _sid(task_id: str, n: int) -> str:
    return f"{task_id}--a{n:02d}"


def steps() -> list[tuple[str, str | None, str, list[EventBase]]]:
    """(stream, owner, actor, events) in the order they are appended."""
    t = T0
    R = "reactor:r1"
    dA, dB = _demand(2, 4), _demand(2, 4)

    def task(tid: str, actor: str, *events: EventBase) -> tuple[str, str | None, str, list[EventBase]]:
        return (task_stream(tid), OWNERS[tid], actor, list(events))

    def cluster(*events: EventBase) -> tuple[str, str | None, str, list[EventBase]]:
        return (cluster_stream, None, R, list(events))

    return [
        (user_stream("alice"), "alice", "system", [UserCreated(user_id="alice", by="admin", created_at=t - 100)]),
        (user_stream("bob"), "bob", "system", [UserCreated(user_id="bob", by="admin", created_at=t - 90)]),
        (user_stream("alice"), "alice", "user:admin", [TokenIssued(
            user_id="alice", token_id="tk1", token_hash="ab" * 32, by="admin", issued_at=t - 80)]),
        cluster(CapacityObserved(nodes=_nodes(4, 4), observed_at=t)),
        task(B, "user:bob", _submitted(B, "grpo", dB, t + 1)),
        task(B, R, _starting(B, 1, t + 2)),
        task(B, R, AttemptSubmitted(task_id=B, attempt_no=1, submission_id=_sid(B, 1), submitted_at=t + 3)),
        task(A, "user:alice", _submitted(A, "ppo", dA, t + 4)),
        cluster(CapacityObserved(nodes=_nodes(4, 2), observed_at=t + 5)),
        task(A, R, TaskDeferred(task_id=A, reason="no_capacity_per_node",
                                message="needs 2 nodes × 4 GPUs; free GPUs per node [4, 2]",
                                needed=dA, free_gpus_per_node=[4.0, 2.0], decided_at=t + 6)),
        task(B, R, AttemptRunning(task_id=B, attempt_no=1, submission_id=_sid(B, 1), started_at=t + 10)),
        task(B, R, AttemptEnded(task_id=B, attempt_no=1, submission_id=_sid(B, 1), ray_status="FAILED",
                                exit_code=1, failure_kind=FailureKind.INSUFFICIENT_RESOURCES,
                                evidence=EVIDENCE, ended_at=t + 12)),
        task(B, R, RetryScheduled(task_id=B, failed_attempt_no=1,
                                  failure_kind=FailureKind.INSUFFICIENT_RESOURCES,
                                  next_run_at=t + 72, delay_s=60.0)),
        cluster(ClusterUnreachable(error="ConnectionError: head:8265 refused", observed_at=t + 13)),
        task(C, "user:alice", _submitted(C, "sft", _demand(1, 4), t + 14, priority=5)),
        task(C, R, TaskDeferred(task_id=C, reason="capacity_unknown", message="Ray is unreachable: capacity unknown",
                                needed=_demand(1, 4), decided_at=t + 15)),
        task(C, "user:alice", TaskCancelRequested(task_id=C, by="alice", requested_at=t + 20)),
        task(C, R, TaskCanceled(task_id=C, by="alice", canceled_at=t + 20.5)),
        cluster(CapacityObserved(nodes=_nodes(4, 2), observed_at=t + 25)),
        task(D, "user:bob", _submitted(D, "ppo", _demand(1, 2), t + 30)),
        task(D, R, _starting(D, 1, t + 31)),
        task(D, R, AttemptSubmitted(task_id=D, attempt_no=1, submission_id=_sid(D, 1), submitted_at=t + 32)),
        task(D, R, AttemptRunning(task_id=D, attempt_no=1, submission_id=_sid(D, 1), started_at=t + 35)),
        cluster(CapacityObserved(nodes=_nodes(4, 4), observed_at=t + 46)),
        task(A, R, _starting(A, 1, t + 48)),
        task(A, R, AttemptSubmitted(task_id=A, attempt_no=1, submission_id=_sid(A, 1), submitted_at=t + 49)),
        task(D, R, AttemptEnded(task_id=D, attempt_no=1, submission_id=_sid(D, 1), ray_status="FAILED",
                                exit_code=1, failure_kind=FailureKind.USER_ERROR, evidence=USER_EVIDENCE,
                                ended_at=t + 50)),
        task(D, R, TaskFailed(task_id=D, attempt_no=1, failure_kind=FailureKind.USER_ERROR,
                              error_summary=USER_EVIDENCE, finished_at=t + 50)),
        task(A, R, AttemptRunning(task_id=A, attempt_no=1, submission_id=_sid(A, 1), started_at=t + 55)),
        task(B, R, TaskDeferred(task_id=B, reason="no_capacity_per_node",
                                message="needs 2 nodes × 4 GPUs; free GPUs per node [0, 0]",
                                needed=dB, free_gpus_per_node=[0.0, 0.0], decided_at=t + 73)),
        task(A, R, AttemptEnded(task_id=A, attempt_no=1, submission_id=_sid(A, 1), ray_status="SUCCEEDED",
                                exit_code=0, ended_at=t + 655)),
        task(A, R, TaskSucceeded(task_id=A, attempt_no=1, finished_at=t + 655)),
        cluster(CapacityObserved(nodes=_nodes(4, 4), observed_at=t + 656)),
        task(B, R, _starting(B, 2, t + 657)),
        task(B, R, AttemptSubmitted(task_id=B, attempt_no=2, submission_id=_sid(B, 2), submitted_at=t + 658)),
        task(B, R, AttemptRunning(task_id=B, attempt_no=2, submission_id=_sid(B, 2), started_at=t + 660)),
        task(E, "user:alice", _submitted(E, "grpo", _demand(1, 8), t + 700)),
        task(E, R, TaskDeferred(task_id=E, reason="no_capacity_per_node",
                                message="needs 1 nodes × 8 GPUs; no node has 8 GPUs",
                                needed=_demand(1, 8), free_gpus_per_node=[0.0, 0.0], decided_at=t + 701)),
        task(B, R, AttemptEnded(task_id=B, attempt_no=2, submission_id=_sid(B, 2), ray_status="SUCCEEDED",
                                exit_code=0, ended_at=t + 1260)),
        task(B, R, TaskSucceeded(task_id=B, attempt_no=2, finished_at=t + 1260)),
    ]


def capture(db: Path) -> Capture:
    """Read the live tables as the API's read models do (plain SQL, not replay code)."""
    conn = sqlite3.connect(db)
    try:
        position, recorded_at = conn.execute(
            "SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1").fetchone()
        states = dict(conn.execute("SELECT task_id, state FROM tasks"))
        queue = [tuple(r) for r in conn.execute(
            "SELECT task_id, wait_reason FROM queue WHERE waiting = 1 ORDER BY seq")]  # fifo: arrival
        free = dict(conn.execute("SELECT node_id, free_gpus FROM cluster_nodes"))
        return Capture(position, recorded_at, states, queue, free)  # type: ignore[arg-type]
    finally:
        conn.close()


async def _record(db: Path, stop_after: int | None = None) -> list[Capture]:
    captures: list[Capture] = []
    store = await open_store(db, synchronous="OFF")
    try:
        for i, (stream, owner, actor, events) in enumerate(steps()):
            if stop_after is not None and i >= stop_after:
                break
            await store.append(stream, None, events, owner=owner, meta=EventMeta(actor=actor))
            captures.append(capture(db))
    finally:
        await store.close()
    return captures


def record(db: Path, stop_after: int | None = None) -> Scenario:
    return Scenario(db=db, captures=asyncio.run(_record(db, stop_after)))


def copy_db(src: Path, dst: Path) -> Path:
    """A byte copy of a closed database (and its WAL, if any)."""
    dst.write_bytes(src.read_bytes())
    wal = src.with_name(src.name + "-wal")
    if wal.exists():
        dst.with_name(dst.name + "-wal").write_bytes(wal.read_bytes())
    return dst


def gpu_seconds() -> dict[str, Any]:
    return {"alice": 600 * 8, "bob": 2 * 8 + 600 * 8 + 15 * 2}
