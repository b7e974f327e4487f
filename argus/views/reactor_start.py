"""What a reactor starts from when it takes the lead: the unfinished tasks, the cluster
as last observed, the run-time history, each user's decayed usage and GPU cap, and the log
position all of these stand at, read in one transaction from the projections. The
reactor folds every later event into them in memory (``argus.reactor.state``)."""

from __future__ import annotations

import sqlite3
import time

import msgspec

from argus.scheduler.history import RuntimeHistory
from argus.store.dbfile import read_transaction
from projections import TaskView, projection_checkpoint
from projections.cluster import ClusterView, read_cluster
from projections.runtime_stats import read_runtime_history
from projections.tasks_read import unfinished_tasks
from projections.usage import UsageLedger, read_usage
from projections.users import admin_ids, gpu_caps

__all__ = ["ReactorStart", "read_reactor_start"]


class ReactorStart(msgspec.Struct, kw_only=True):
    """The projections at ``position`` (the ``tasks`` projection's checkpoint)."""

    position: int
    tasks: list[TaskView]
    usage: UsageLedger
    runtimes: RuntimeHistory
    gpu_caps: dict[str, float]  # by user: GPUs their tasks may hold at once
    admins: set[str]
    cluster: ClusterView | None  # None: never observed


def read_reactor_start(db: sqlite3.Connection, half_life_s: float) -> ReactorStart:
    """Snapshot the unfinished tasks and the last cluster observation, consistently."""
    with read_transaction(db):
        usage = read_usage(db, half_life_s, now=time.time())
        position = projection_checkpoint(db, "tasks")
        tasks = unfinished_tasks(db)
        runtimes = read_runtime_history(db)
        caps, admins = gpu_caps(db), admin_ids(db)
        cluster = read_cluster(db)
    return ReactorStart(position=position, tasks=tasks, usage=usage, runtimes=runtimes, gpu_caps=caps,
                        admins=admins, cluster=cluster)
