"""``at``: the world as it was at a log position or time.

The projections are rebuilt up to that position into a scratch database with the one fold
(``rebuild_projections``) and then read with the same queries the live read models answer:
every task's state, the queue in order with wait reasons, running attempts, and the last
known capacity per node. ``read_world`` works on any database with projection tables.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from argus.replay.source import head_position, open_log, resolve_point, scratch_db
from projections import default_projections, rebuild_projections
from argus.scheduler.queue import read_queue
from projections.queue import QueueEntry

__all__ = [
    "ClusterAt",
    "NodeAt",
    "RunningAttempt",
    "TaskAt",
    "World",
    "read_world",
    "world_at",
]



class TaskAt(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    user: str
    workload: str
    state: str
    priority: int
    attempts: int
    created_at: float
    updated_at: float
    wait_reason: str | None = None
    failure_kind: str | None = None
    next_run_at: float | None = None


class RunningAttempt(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    user: str
    attempt_no: int
    submission_id: str
    task_state: str
    ray_status: str
    nnodes: int
    n_gpus_per_node: int
    started_at: float | None = None


class NodeAt(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    ip: str
    total_gpus: float
    free_gpus: float
    total_cpus: float
    free_cpus: float
    observed_at: float


class ClusterAt(msgspec.Struct, frozen=True, kw_only=True):
    reachable: bool | None  # None: nothing observed yet
    error: str = ""
    observed_at: float | None = None
    nodes: list[NodeAt] = []


class World(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    recorded_at: float | None  # when the event at ``position`` was recorded
    tasks: list[TaskAt]
    queue: list[QueueEntry]  # in the policy's order (``argus.scheduler.queue``)
    running: list[RunningAttempt]
    cluster: ClusterAt



def world_at(db_path: str | Path, point: str | int | float | None = None, *, policy: str = "fifo") -> World:
    """The world at ``point``: a position (int), a time (float UNIX seconds, ``@N``, or
    ISO-8601 text), or None for the head of the log; its queue in ``policy``'s order."""
    with open_log(db_path) as source:
        conn = source.conn
        conn.execute("BEGIN")
        try:
            position = head_position(conn) if point is None else resolve_point(conn, point)
            recorded = conn.execute(
                "SELECT recorded_at FROM events WHERE position = ?", (position,)
            ).fetchone()
            with scratch_db() as scratch:
                scratch.execute("BEGIN")
                if position > 0:
                    rebuild_projections(conn, scratch, default_projections(), until=position)
                scratch.execute("COMMIT")
                return read_world(scratch, position, recorded[0] if recorded else None, policy=policy)
        finally:
            conn.execute("COMMIT")


def read_world(db: sqlite3.Connection, position: int, recorded_at: float | None = None, *,
               policy: str = "fifo") -> World:
    """Read the projection tables of ``db`` as a World (any database: scratch or live)."""
    tasks = [
        TaskAt(task_id=r[0], user=r[1], workload=r[2], state=r[3], priority=r[4], attempts=r[5],
               created_at=r[6], updated_at=r[7], wait_reason=r[8], failure_kind=r[9],
               next_run_at=r[10])
        for r in db.execute(
            "SELECT task_id, user, workload, state, priority, latest_attempt_no, created_at, "
            "updated_at, wait_reason, failure_kind, next_run_at FROM tasks "
            "ORDER BY created_at, task_id"
        )
    ]
    queue = read_queue(db, policy)
    # The newest attempt of every task that may hold a Ray job, not yet ended.
    running = [
        RunningAttempt(task_id=r[0], user=r[1], attempt_no=r[2], submission_id=r[3],
                       task_state=r[4], ray_status=r[5], nnodes=r[6], n_gpus_per_node=r[7],
                       started_at=r[8])
        for r in db.execute(
            "SELECT a.task_id, t.user, a.attempt_no, a.submission_id, t.state, a.ray_status, "
            "q.nnodes, q.n_gpus_per_node, a.started_at "
            "FROM tasks t JOIN attempts a ON a.task_id = t.task_id "
            "AND a.attempt_no = t.latest_attempt_no "
            "JOIN queue q ON q.task_id = t.task_id "
            "WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING', 'CANCELING') "
            "AND a.ended_at IS NULL ORDER BY q.seq"
        )
    ]
    status = db.execute("SELECT reachable, error, observed_at FROM cluster_status").fetchone()
    nodes = [
        NodeAt(node_id=r[0], ip=r[1], total_gpus=r[2], free_gpus=r[3], total_cpus=r[4],
               free_cpus=r[5], observed_at=r[6])
        for r in db.execute(
            "SELECT node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus, observed_at "
            "FROM cluster_nodes ORDER BY node_id"
        )
    ]
    cluster = (
        ClusterAt(reachable=bool(status[0]), error=status[1] or "", observed_at=status[2], nodes=nodes)
        if status
        else ClusterAt(reachable=None, nodes=nodes)
    )
    return World(position=position, recorded_at=recorded_at, tasks=tasks, queue=queue,
                 running=running, cluster=cluster)
