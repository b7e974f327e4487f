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

from argus.events import NodeCapacity
from argus.lifecycle import TaskState
from argus.replay.source import head_position, open_log, resolve_point, scratch_db
from argus.scheduler.queue import read_queue
from argus.store.dbfile import event_recorded_at, read_transaction
from projections import default_projections, rebuild_projections
from projections.cluster import read_cluster
from projections.queue import QueueEntry
from projections.tasks_read import TaskSummary, all_tasks, summarize

__all__ = [
    "ClusterAt",
    "RunningAttempt",
    "World",
    "read_world",
    "world_at",
]



class RunningAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """The newest attempt of a task that may hold a Ray job, not yet ended."""

    task_id: str
    user: str
    attempt_no: int
    submission_id: str
    task_state: str
    ray_status: str
    nnodes: int
    n_gpus_per_node: int
    started_at: float | None = None


class ClusterAt(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster as last observed (``projections.cluster.ClusterView``; reachable None:
    nothing observed yet)."""

    reachable: bool | None
    error: str = ""
    observed_at: float | None = None
    nodes: list[NodeCapacity] = []


class World(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    recorded_at: float | None  # when the event at ``position`` was recorded
    tasks: list[TaskSummary]  # oldest first, as the task lists show them
    queue: list[QueueEntry]  # in the policy's order (``argus.scheduler.queue``)
    running: list[RunningAttempt]
    cluster: ClusterAt



def world_at(db_path: str | Path, point: str | int | float | None = None, *, policy: str = "fifo") -> World:
    """The world at ``point``: a position (int), a time (float UNIX seconds, ``@N``, or
    ISO-8601 text), or None for the head of the log; its queue in ``policy``'s order."""
    with open_log(db_path) as source, read_transaction(source.conn) as conn:
        position = head_position(conn) if point is None else resolve_point(conn, point)
        with scratch_db() as scratch:
            with read_transaction(scratch):
                if position > 0:
                    rebuild_projections(conn, scratch, default_projections(), until=position)
            return read_world(scratch, position, event_recorded_at(conn, position), policy=policy)


def read_world(db: sqlite3.Connection, position: int, recorded_at: float | None = None, *,
               policy: str = "fifo") -> World:
    """Read the projections of ``db`` as a World (any database: scratch or live), through
    the same readers the API uses."""
    views = all_tasks(db)
    running = [
        RunningAttempt(task_id=v.task_id, user=v.user, attempt_no=a.attempt_no, submission_id=a.submission_id,
                       task_state=v.state.value, ray_status=a.ray_status, nnodes=v.demand.nnodes,
                       n_gpus_per_node=v.demand.n_gpus_per_node, started_at=a.started_at)
        for v in sorted(views, key=lambda v: v.seq)
        if (v.state.holds_ray_job() or v.state is TaskState.CANCELING)
        and (a := v.latest_attempt) is not None and not a.ended
    ]
    seen = read_cluster(db)
    cluster = (ClusterAt(reachable=None) if seen is None else
               ClusterAt(reachable=seen.reachable, error=seen.error, observed_at=seen.observed_at,
                         nodes=list(seen.nodes)))
    return World(position=position, recorded_at=recorded_at, tasks=[summarize(v) for v in views],
                 queue=read_queue(db, policy), running=running, cluster=cluster)
