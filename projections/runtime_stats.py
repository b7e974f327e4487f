"""How long tasks ran, per user, workload and gang shape: the history behind run-time
estimates (issue: reservations and ETAs need an expected end for every task).

Kept from the task fold: a task that becomes SUCCEEDED adds its last attempt's run time
(from when Ray reported it running, or accepted it when the job ended before it was seen
running, to its end). Failed and canceled runs say nothing about how long the work takes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import msgspec

from argus.lifecycle import TaskState
from projections.base import Change, EntityProjection
from projections.tasks import TASK_FOLD, TaskView

__all__ = ["RunKey", "RuntimeHistory", "RuntimeStatsProjection", "read_runtime_history", "run_key", "run_seconds"]

_ADD = ("INSERT INTO runtime_stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, workload, nnodes, n_gpus_per_node) "
        "DO UPDATE SET n = n + excluded.n, total_s = total_s + excluded.total_s")


class RunKey(msgspec.Struct, frozen=True, array_like=True):
    """What makes two tasks' run times comparable: the same user, workload and gang."""

    user: str
    workload: str
    nnodes: int
    n_gpus_per_node: int


def run_key(task: TaskView) -> RunKey:
    return RunKey(task.user, task.workload, task.demand.nnodes, task.demand.n_gpus_per_node)


def run_seconds(task: TaskView) -> float | None:
    """How long a finished task's last attempt ran; None if it never did."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ended_at is None:
        return None
    began = attempt.started_at or attempt.submitted_at
    return None if began is None else max(0.0, attempt.ended_at - began)


class RuntimeHistory:
    """Run times of succeeded tasks by ``RunKey`` (count and total), and the estimate they
    give: a task's ``time_limit`` if it has one (it cannot run longer), else the mean of
    the same user's runs of the same workload and shape, else ``default_s``."""

    def __init__(self, sums: dict[RunKey, tuple[int, float]] | None = None) -> None:
        self.sums: dict[RunKey, tuple[int, float]] = dict(sums or {})

    def add(self, key: RunKey, seconds: float) -> None:
        n, total = self.sums.get(key, (0, 0.0))
        self.sums[key] = (n + 1, total + seconds)

    def estimate(self, task: TaskView, default_s: float) -> tuple[float, str]:
        """Expected run time of ``task`` and where it comes from (for messages)."""
        if task.time_limit_s is not None:
            return task.time_limit_s, "its time_limit"
        n, total = self.sums.get(run_key(task), (0, 0.0))
        if n:
            return total / n, f"the mean of {n} earlier run(s)"
        return default_s, "the configured default"


class RuntimeStatsProjection(EntityProjection[TaskView]):
    name = "runtime_stats"
    version = 1
    tables = ("runtime_stats",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        rows = [row for _, before, after in changes
                if after is not None and after.state is TaskState.SUCCEEDED
                and (before is None or before.state is not TaskState.SUCCEEDED)
                and (row := _row(after)) is not None]
        if rows:
            db.executemany(_ADD, rows)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        db.executemany(_ADD, _rows(v for v in entities.values() if v.state is TaskState.SUCCEEDED))


def _row(task: TaskView) -> tuple[object, ...] | None:
    seconds = run_seconds(task)
    if seconds is None:
        return None
    k = run_key(task)
    return (k.user, k.workload, k.nnodes, k.n_gpus_per_node, 1, seconds)


def _rows(tasks: Iterable[TaskView]) -> Iterable[tuple[object, ...]]:
    return (row for t in tasks if (row := _row(t)) is not None)


def read_runtime_history(db: sqlite3.Connection) -> RuntimeHistory:
    return RuntimeHistory({
        RunKey(user, workload, nnodes, gpus): (n, total)
        for user, workload, nnodes, gpus, n, total in db.execute("SELECT * FROM runtime_stats")
    })
