"""Goodput per user and for the cluster (``/goodput``, ``/metrics``): finished tasks' kept in
``task_goodput``, unfinished ones' computed when read.

A finished task's goodput no longer changes (``projections.goodput.task_goodput`` counts it
to its last event), so it is kept, one row per task, when the task ends (again, should a
late event move it). An unfinished task's grows with the clock: the reader folds it in at
``now``. Rows, not running sums: a rebuild then writes exactly what the inline path wrote,
and a sum over a user's rows is one index walk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from projections.base import Change, EntityProjection, insert_sql, upsert_sql
from projections.goodput import CATEGORIES, Goodput, UserGoodput, by_user, task_goodput
from projections.tasks import TASK_FOLD, TaskView
from projections.tasks_read import unfinished_tasks

__all__ = ["GoodputProjection", "GoodputReport", "read_goodput"]

_NUMBERS = ("held", *CATEGORIES, "waiting_s", "lost_steps")
_COLUMNS = ", ".join(("task_id", "user", *_NUMBERS))
_UPSERT = upsert_sql("task_goodput", _COLUMNS, "task_id", frozenset({"user"}))
_INSERT = insert_sql("task_goodput", _COLUMNS)


class GoodputReport(msgspec.Struct, kw_only=True):
    """Goodput at ``at``: per user (by user id), and the cluster's, over every task so far."""

    at: float
    users: list[UserGoodput]
    cluster: UserGoodput


def _row(view: TaskView) -> tuple[object, ...]:
    g = task_goodput(view, view.updated_at)  # finished: ``now`` is not read
    return (view.task_id, view.user, *(getattr(g, name) for name in _NUMBERS))


class GoodputProjection(EntityProjection[TaskView]):
    """``task_goodput``: one row per finished task."""

    name = "task_goodput"
    version = 1
    tables = ("task_goodput",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        rows = [_row(after) for _, _, after in changes if after is not None and after.state.is_terminal()]
        if rows:
            db.executemany(_UPSERT, rows)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        db.executemany(_INSERT, (_row(v) for v in entities.values() if v.state.is_terminal()))


def _finished(db: sqlite3.Connection) -> dict[str, tuple[int, Goodput]]:
    sums = ", ".join(f"total({name})" for name in _NUMBERS)
    out: dict[str, tuple[int, Goodput]] = {}
    for who, n, *numbers in db.execute(f"SELECT user, count(*), {sums} FROM task_goodput GROUP BY user"):
        fields = dict(zip(_NUMBERS, numbers))
        fields["lost_steps"] = int(fields["lost_steps"])
        out[who] = (n, Goodput().plus(Goodput(**fields)))  # plus: with its ratio
    return out


def read_goodput(db: sqlite3.Connection, now: float) -> GoodputReport:
    """Every task's goodput at ``now``, summed per user and for the cluster."""
    sums = _finished(db)
    live = [(v.user, task_goodput(v, now)) for v in unfinished_tasks(db)]
    for row in by_user(live)[:-1]:  # without its cluster row: summed below
        n, g = sums.get(row.user, (0, Goodput()))
        sums[row.user] = (n + row.tasks, g.plus(row.goodput))
    users = [UserGoodput(user=u, tasks=n, goodput=g) for u, (n, g) in sorted(sums.items())]
    cluster = Goodput()
    for row in users:
        cluster = cluster.plus(row.goodput)
    return GoodputReport(at=now, users=users, cluster=UserGoodput(user="*", tasks=sum(r.tasks for r in users),
                                                                  goodput=cluster))
