"""How long tasks ran, per user, workload and gang shape: the history behind run-time
estimates (issue: reservations and ETAs need an expected end for every task).

Kept from the task fold: a task that becomes SUCCEEDED adds its last attempt's run time
(from when Ray reported it running, or accepted it when the job ended before it was seen
running, to its end). Failed and canceled runs say nothing about how long the work takes.

Two tables: the count and total (``runtime_stats``: the mean), and the count per
logarithmic bucket (``runtime_buckets``: the median, to within a bucket's width). The
estimate is the median: run times are heavy-tailed, so the mean overestimates most runs.
On the openb trace (``argus sim … --eta``) estimates from the median made the ETAs given
at arrival off by a median 24 % of the actual wait, against 127 % from the mean. The
history itself, and the estimate it gives, are the scheduler's input
(``argus.scheduler.history``); this module keeps it in the database and reads it back.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence

from argus.lifecycle import TaskState
from argus.scheduler.history import RunKey, RuntimeHistory, bucket_of, run_key, run_seconds
from projections.base import Change, EntityProjection
from projections.tasks import TASK_FOLD, TaskView

__all__ = ["RuntimeStatsProjection", "read_runtime_history"]

_ADD = ("INSERT INTO runtime_stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, workload, nnodes, n_gpus_per_node) "
        "DO UPDATE SET n = n + excluded.n, total_s = total_s + excluded.total_s")
_ADD_BUCKET = ("INSERT INTO runtime_buckets VALUES (?, ?, ?, ?, ?, 1) "
               "ON CONFLICT (user, workload, nnodes, n_gpus_per_node, bucket) DO UPDATE SET n = n + 1")
# What a rebuild writes: the totals it summed, and counts per bucket to add.
_SET = ("INSERT INTO runtime_stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, workload, nnodes, n_gpus_per_node) "
        "DO UPDATE SET n = excluded.n, total_s = excluded.total_s")
_ADD_BUCKETS = ("INSERT INTO runtime_buckets VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (user, workload, nnodes, n_gpus_per_node, bucket) DO UPDATE SET n = n + excluded.n")


class RuntimeStatsProjection(EntityProjection[TaskView]):
    name = "runtime_stats"
    version = 2
    tables = ("runtime_stats", "runtime_buckets")
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        rows = [row for _, before, after in changes
                if after is not None and after.state is TaskState.SUCCEEDED
                and (before is None or before.state is not TaskState.SUCCEEDED)
                and (row := _row(after)) is not None]
        if rows:
            _write(db, rows)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        # A rebuild adds ~100,000 runs to a few dozen keys: summed here, one statement per
        # key rather than two upserts per run. Each total goes on from what the table holds
        # (an earlier part's) and adds the runs in the same order the upserts did, so the
        # floats come out bit for bit the same.
        sums: dict[tuple[object, ...], tuple[int, float]] = {
            tuple(key): (n, total) for *key, n, total in db.execute("SELECT * FROM runtime_stats")
        }
        buckets: Counter[tuple[object, ...]] = Counter()
        for task in entities.values():
            if task.state is not TaskState.SUCCEEDED or (seconds := run_seconds(task)) is None:
                continue
            k = run_key(task)
            key = (k.user, k.workload, k.nnodes, k.n_gpus_per_node)
            found = sums.get(key)
            sums[key] = (1, seconds) if found is None else (found[0] + 1, found[1] + seconds)
            buckets[(*key, bucket_of(seconds))] += 1
        db.executemany(_SET, [(*key, n, total) for key, (n, total) in sums.items()])
        db.executemany(_ADD_BUCKETS, [(*key, n) for key, n in buckets.items()])


def _write(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.executemany(_ADD, rows)
    db.executemany(_ADD_BUCKET, [(*row[:4], bucket_of(row[5])) for row in rows])  # type: ignore[arg-type]


def _row(task: TaskView) -> tuple[object, ...] | None:
    seconds = run_seconds(task)
    if seconds is None:
        return None
    k = run_key(task)
    return (k.user, k.workload, k.nnodes, k.n_gpus_per_node, 1, seconds)


def read_runtime_history(db: sqlite3.Connection) -> RuntimeHistory:
    buckets: dict[RunKey, dict[int, int]] = {}
    for user, workload, nnodes, gpus, bucket, n in db.execute("SELECT * FROM runtime_buckets"):
        buckets.setdefault(RunKey(user, workload, nnodes, gpus), {})[bucket] = n
    return RuntimeHistory({
        RunKey(user, workload, nnodes, gpus): (n, total)
        for user, workload, nnodes, gpus, n, total in db.execute("SELECT * FROM runtime_stats")
    }, buckets)
