"""``at``: the world as it was at a log position or time.

The projections are rebuilt up to that position into a scratch database with the one fold
(``rebuild_projections``) and then read with the same queries the live read models answer:
every task's state, the queue in order with wait reasons, running attempts, and the last
known capacity per node. ``read_world`` works on any database with projection tables.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import msgspec

from argus.config import SchedulerConfig
from argus.replay.source import head_position, open_log, resolve_point, scratch_db
from argus.store import event_recorded_at, read_transaction
from argus.views.queue import FairView, read_queue
from projections import default_projections, rebuild_projections
from projections.cluster import ClusterAt, NodeAt, cluster_at
from projections.queue import QueueEntry
from projections.tasks_read import RunningAttempt, TaskAt, running_attempts, tasks_at

__all__ = [
    "ClusterAt",
    "NodeAt",
    "RunningAttempt",
    "TaskAt",
    "World",
    "read_world",
    "world_at",
]


class World(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    recorded_at: float | None  # when the event at ``position`` was recorded
    tasks: list[TaskAt]  # oldest first
    queue: list[QueueEntry]  # in the policy's order (``argus.views.queue``)
    running: list[RunningAttempt]
    cluster: ClusterAt


def world_at(db_path: str | Path, point: str | int | float | None = None, *, policy: str = "fifo",
             sched: SchedulerConfig | None = None) -> World:
    """The world at ``point``: a position (int), a time (float UNIX seconds, ``@N``, or
    ISO-8601 text), or None for the head of the log; its queue in ``policy``'s order
    (``sched``: the shares and quotas a ``fairshare`` order is computed with)."""
    with open_log(db_path) as source, read_transaction(source.conn) as conn:
        position = head_position(conn) if point is None else resolve_point(conn, point)
        with scratch_db() as scratch:
            with read_transaction(scratch):
                if position > 0:
                    rebuild_projections(conn, scratch, default_projections(), until=position)
            return read_world(scratch, position, event_recorded_at(conn, position), policy=policy, sched=sched)


def read_world(db: sqlite3.Connection, position: int, recorded_at: float | None = None, *,
               policy: str = "fifo", sched: SchedulerConfig | None = None) -> World:
    """Read the projections of ``db`` as a World (any database: scratch or live)."""
    fair = FairView(sched or SchedulerConfig(), recorded_at or time.time())  # the order as it was then
    return World(position=position, recorded_at=recorded_at, tasks=tasks_at(db), queue=read_queue(db, policy, fair),
                 running=running_attempts(db), cluster=cluster_at(db))
