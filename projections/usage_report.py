"""Usage you can account for (issue 56 part 4): GPU-hours by GPU model, wait time and
goodput, by team or user and by day (UTC), counted from the task projection (a fold of the
log), so a rebuild gives the same numbers.

- GPU-hours: what the goodput figures call *held*: each attempt from the scheduler's
  decision (``AttemptStarting``) to its end (a running one's: ``now``; one left without an
  end in a finished task: the task's last event), times its gang's GPUs, cut at midnight
  UTC onto the days it fell in. The GPU model is that of the node its gang was placed on
  first, as the cluster was last observed, else the one model its task asked for, else
  ``any``.
- Goodput and wait: a finished task's (``projections.goodput.task_goodput``), on the day it
  finished (its last attempt's end; a task canceled while waiting: its last event): the GPU-hours it held and of them productive, and the hours it waited. Tasks
  still going are counted on the day they finish.
- Teams: a user's team as it is now (``projections.teams``); users in no team are ``-``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from typing import Literal

import msgspec

from argus.lifecycle import TaskState
from projections.cluster import read_cluster
from projections.goodput import task_goodput
from projections.task_view import AttemptView, TaskView
from projections.teams import read_team_model

__all__ = ["NO_TEAM", "UsageBy", "UsageReport", "UsageRow", "attempt_model", "day_of", "read_usage_report",
           "usage_report"]

DAY = 86400.0
HOUR = 3600.0
NO_TEAM = "-"
UsageBy = Literal["team", "user"]
_decode_view = msgspec.json.Decoder(TaskView).decode


class UsageRow(msgspec.Struct, kw_only=True):
    """One team's or user's (``key``) usage on one UTC ``day`` (YYYY-MM-DD)."""

    key: str
    day: str
    gpu_hours: float = 0.0  # held, every model
    gpu_hours_by_model: dict[str, float] = {}
    tasks_finished: int = 0  # tasks that finished this day: the goodput and wait below are theirs
    held_gpu_hours: float = 0.0  # GPU-hours those tasks held, over their whole life
    productive_gpu_hours: float = 0.0
    goodput: float | None = None  # productive / held (None: they held nothing)
    wait_hours: float = 0.0


class UsageReport(msgspec.Struct, kw_only=True):
    """Usage in [``since``, ``until``) at ``at``, by ``by``; ``gpu_models``: every model seen."""

    by: str
    since: float
    until: float
    at: float
    gpu_models: list[str]
    rows: list[UsageRow]


def day_of(t: float) -> str:
    """The UTC day of ``t``, as YYYY-MM-DD."""
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def attempt_model(task: TaskView, a: AttemptView, node_models: dict[str, str]) -> str:
    """The GPU model an attempt held: its first node's, else the one its task asked for."""
    for node in a.node_ids[:1]:
        if node_models.get(node):
            return node_models[node]
    types = task.demand.gpu_types
    return types[0] if len(types) == 1 else "any"


def _spans(begin: float, end: float, since: float, until: float) -> Iterable[tuple[str, float]]:
    """(day, seconds) of [begin, end) inside [since, until), cut at midnight UTC."""
    t, end = max(begin, since), min(end, until)
    while t < end:
        upto = min(end, (t // DAY + 1) * DAY)
        yield day_of(t), upto - t
        t = upto


def _finished_at(task: TaskView) -> float:
    """When a finished task finished: its last attempt's end (the time the reactor saw it),
    else (canceled while it waited) its last event's."""
    latest = task.latest_attempt
    return latest.ended_at if latest is not None and latest.ended_at is not None else task.updated_at


def usage_report(tasks: Iterable[TaskView], *, by: UsageBy, team_of: dict[str, str], node_models: dict[str, str],
                 since: float, until: float, now: float) -> UsageReport:
    """Pure: the usage of ``tasks`` (see the module's docstring)."""
    rows: dict[tuple[str, str], UsageRow] = {}
    models: set[str] = set()

    def row(user: str, day: str) -> UsageRow:
        key = user if by == "user" else team_of.get(user, NO_TEAM)
        return rows.setdefault((key, day), UsageRow(key=key, day=day, gpu_hours_by_model={}))

    for task in tasks:
        finished = task.state.is_terminal()
        last = task.updated_at if finished else now
        gpus = task.demand.total_gpus
        for a in task.attempts:
            end = max(a.decided_at, a.ended_at if a.ended_at is not None else last)
            model = attempt_model(task, a, node_models)
            for day, seconds in _spans(a.decided_at, end, since, until):
                r = row(task.user, day)
                hours = gpus * seconds / HOUR
                r.gpu_hours += hours
                r.gpu_hours_by_model[model] = r.gpu_hours_by_model.get(model, 0.0) + hours
                models.add(model)
        done = _finished_at(task) if finished else None
        if done is not None and since <= done < until:
            g = task_goodput(task, task.updated_at)
            r = row(task.user, day_of(done))
            r.tasks_finished += 1
            r.held_gpu_hours += g.held / HOUR
            r.productive_gpu_hours += g.productive / HOUR
            r.wait_hours += g.waiting_s / HOUR
    out = sorted(rows.values(), key=lambda r: (r.day, r.key))
    for r in out:
        r.goodput = r.productive_gpu_hours / r.held_gpu_hours if r.held_gpu_hours > 0 else None
    return UsageReport(by=by, since=since, until=until, at=now, gpu_models=sorted(models), rows=out)


def _tasks_since(db: sqlite3.Connection, since: float) -> list[TaskView]:
    """Tasks that changed since ``since``, and every unfinished one (a task that last
    changed before ``since`` and finished then held nothing after it)."""
    terminal = tuple(s.value for s in TaskState if s.is_terminal())
    rows = db.execute(f"SELECT view FROM tasks WHERE updated_at >= ? OR state NOT IN ({','.join('?' * len(terminal))})",
                      (since, *terminal))
    return [_decode_view(view) for (view,) in rows]


def read_usage_report(db: sqlite3.Connection, *, by: UsageBy, since: float, until: float,
                      now: float) -> UsageReport:
    """The usage report of the projections in ``db`` (a live store's, or a rebuild's)."""
    cluster = read_cluster(db)
    node_models = {n.node_id: n.gpu_type for n in cluster.nodes} if cluster else {}
    return usage_report(_tasks_since(db, since), by=by, team_of=read_team_model(db).team_of,
                        node_models=node_models, since=since, until=until, now=now)
