"""Goodput per user and for the cluster (``/goodput``, ``/metrics``): finished tasks' summed
per user in ``goodput_sums``, unfinished ones' computed when read.

A finished task's goodput no longer changes (``projections.goodput.task_goodput`` counts it
to its last event), so it is added to its user's sums when the task ends (and, should a late
event move it, what was added is taken back and the new figures added). The sums are
integer milliseconds: integers add exactly in any order, so the sums kept as tasks finish
equal a rebuild's. An unfinished task's figures grow with the clock: the reader adds them
at ``now``. So a read is one row per user plus the unfinished tasks, however long the log.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

import msgspec

from projections.base import Change, EntityProjection
from projections.goodput import CATEGORIES, Goodput, UserGoodput, by_user, task_goodput
from projections.tasks import TASK_FOLD, TaskView
from projections.tasks_read import unfinished_tasks

__all__ = ["GoodputProjection", "GoodputReport", "read_goodput"]

_SECONDS = ("held", *CATEGORIES, "waiting_s")  # kept as integer milliseconds
_COLUMNS = ("tasks", *_SECONDS, "lost_steps")
_ADD = (f"INSERT INTO goodput_sums (user, {', '.join(_COLUMNS)}) VALUES (?{', ?' * len(_COLUMNS)}) "
        f"ON CONFLICT (user) DO UPDATE SET {', '.join(f'{c} = {c} + excluded.{c}' for c in _COLUMNS)}")


class GoodputReport(msgspec.Struct, kw_only=True):
    """Goodput at ``at``: per user (by user id), and the cluster's, over every task so far."""

    at: float
    users: list[UserGoodput]
    cluster: UserGoodput


def _sums(view: TaskView) -> list[int]:
    """A finished task's figures as its row adds them: one task, milliseconds, lost steps."""
    g = task_goodput(view, view.updated_at)  # finished: ``now`` is not read
    return [1, *(round(getattr(g, name) * 1000) for name in _SECONDS), g.lost_steps]


def _add(db: sqlite3.Connection, deltas: Iterable[tuple[str, list[int]]]) -> None:
    totals: dict[str, list[int]] = {}
    for user, delta in deltas:
        acc = totals.setdefault(user, [0] * len(_COLUMNS))
        for i, d in enumerate(delta):
            acc[i] += d
    rows = [(user, *acc) for user, acc in totals.items() if any(acc)]
    if rows:
        db.executemany(_ADD, rows)


class GoodputProjection(EntityProjection[TaskView]):
    """``goodput_sums``: one row per user, the sums of their finished tasks."""

    name = "goodput_sums"
    version = 1
    tables = ("goodput_sums",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        deltas: list[tuple[str, list[int]]] = []
        for _, before, after in changes:
            if after is None or not after.state.is_terminal():
                continue  # (a finished task never becomes unfinished again)
            added = _sums(after)
            if before is not None and before.state.is_terminal():  # moved by a late event
                added = [a - b for a, b in zip(added, _sums(before))]
            deltas.append((after.user, added))
        _add(db, deltas)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        # Added to what is there: a parallel rebuild writes its shares one after another.
        _add(db, ((v.user, _sums(v)) for v in entities.values() if v.state.is_terminal()))


def _finished(db: sqlite3.Connection) -> dict[str, tuple[int, Goodput]]:
    out: dict[str, tuple[int, Goodput]] = {}
    for user, tasks, *numbers in db.execute(f"SELECT user, {', '.join(_COLUMNS)} FROM goodput_sums"):
        fields: dict[str, float] = {name: ms / 1000 for name, ms in zip(_SECONDS, numbers)}
        out[user] = (tasks, Goodput().plus(Goodput(**fields, lost_steps=numbers[-1])))  # plus: with its ratio
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
