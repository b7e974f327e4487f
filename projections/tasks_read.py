"""Typed reads of the ``tasks`` projection: what the API, the service and the reactor ask.

These Structs are also the API's response shapes for tasks (``argus.api.schemas``
re-exports them), so a task looks the same in the log's fold, in the API and in replay.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from argus.lifecycle import TaskState
from projections.cursor import Cursor
from projections.goodput import Goodput
from projections.task_view import AttemptView
from projections.tasks import TASK_FOLD, TaskView, load_task

__all__ = [
    "AttemptDetail", "PageCursor", "RunningAttempt", "task_detail", "TaskAt", "TaskCounts", "all_tasks", "TaskDetail", "TaskPage", "TaskSummary",
    "running_attempts", "summarize", "task_counts", "task_page", "task_view", "task_views", "task_workloads", "tasks_at",
    "tasks_in_states", "unfinished_tasks", "waiting_count",
]

_decode_view = msgspec.json.Decoder(TaskView).decode


class AttemptDetail(AttemptView, frozen=True, kw_only=True):
    """One attempt in ``GET /tasks/{id}``: its view, and the seed platform's names for the
    same facts, always present (docs/api.md, "The seed platform's names")."""

    ray_submission_id: str  # = submission_id (the Ray job's submission id)
    start_time: float | None  # = started_at
    end_time: float | None  # = ended_at
    message: str  # = evidence: the words its end was judged by ("" while it runs)


def _attempt_detail(a: AttemptView) -> AttemptDetail:
    return AttemptDetail(**msgspec.structs.asdict(a), ray_submission_id=a.submission_id,
                         start_time=a.started_at, end_time=a.ended_at, message=a.evidence)


class TaskDetail(TaskView, frozen=True, kw_only=True, omit_defaults=False):
    """One task whole (``GET /tasks/{id}``): its view, and its place in line while it waits."""

    attempts: tuple[AttemptDetail, ...] = ()
    # The seed platform's names: its latest attempt (the last of ``attempts``), and its
    # spec as it was sent (``GET /tasks/{id}/spec``'s ``spec_raw``).
    latest_attempt: AttemptDetail | None = None  # type: ignore[assignment]
    jobspec: str = ""
    # The CPUs its job driver takes (entrypoint_num_cpus): the scheduler, its wait reasons
    # and the cluster page count demand.cpus_per_node + driver_cpus on each node.
    driver_cpus: float = 0.0

    queue_position: int | None = None
    # While it waits: the 80 % interval of its start (argus.scheduler.eta_range; latest
    # null: no upper end known), beside ``expected_start``, the point estimate.
    start_earliest: float | None = None
    start_latest: float | None = None
    # The GPU time it held and where it went, up to when it was read (projections.goodput).
    goodput: Goodput | None = None


class TaskSummary(msgspec.Struct, kw_only=True):
    """One row of a task list."""

    task_id: str
    user: str
    workload: str
    kind: str
    state: str
    priority: int
    created_at: float
    updated_at: float
    attempts: int
    failure_kind: str | None = None
    error_summary: str | None = None
    wait_reason: str | None = None
    wait_message: str = ""
    name: str = ""
    gpus: int = 0  # the whole gang: nnodes × n_gpus_per_node
    started_at: float | None = None  # the latest attempt's
    ended_at: float | None = None
    step: int | None = None  # the latest attempt's last training step, as its driver reported it
    total_steps: int | None = None
    # While it waits: its estimated start and the 80 % interval (as the task's own page;
    # set by the API, which runs the policy forward)
    expected_start: float | None = None
    start_earliest: float | None = None
    start_latest: float | None = None


class TaskPage(msgspec.Struct, kw_only=True):
    """A page of a task list, newest first; how many tasks the filter matches; and
    ``next_cursor``, to pass as ``cursor`` for the next page (null on the last)."""

    items: list[TaskSummary]
    total: int
    limit: int
    offset: int = 0
    next_cursor: str | None = None


def task_detail(v: TaskView, *, jobspec: str, **extra: Any) -> TaskDetail:
    """``v`` as ``GET /tasks/{id}`` serves it, with ``extra`` fields of TaskDetail."""
    attempts = tuple(_attempt_detail(a) for a in v.attempts)
    fields = {**msgspec.structs.asdict(v), "attempts": attempts, **extra}
    return TaskDetail(**fields, latest_attempt=attempts[-1] if attempts else None, jobspec=jobspec)


def summarize(v: TaskView) -> TaskSummary:
    latest = v.latest_attempt
    return TaskSummary(
        task_id=v.task_id, user=v.user, workload=v.workload, kind=v.kind, state=v.state.value,
        priority=v.priority, created_at=v.created_at, updated_at=v.updated_at,
        attempts=len(v.attempts), failure_kind=v.failure_kind.value if v.failure_kind else None,
        error_summary=v.error_summary or None, wait_reason=v.wait_reason,
        wait_message=v.wait_message, name=v.name, gpus=v.demand.total_gpus,
        started_at=latest.started_at if latest else None,
        ended_at=latest.ended_at if latest else None, step=latest.step if latest else None,
        total_steps=v.total_steps or (latest.total_steps if latest else None))


def task_view(db: sqlite3.Connection, task_id: str) -> TaskView | None:
    """The task as the log says it is now, or None for an unknown id."""
    return load_task(db, task_id)


class PageCursor(Cursor, frozen=True):
    """Where a page of a task list ended: its last row's place in the list's order (newest
    first, task id as the tie-break). The next page starts strictly after it, so a page
    costs one index walk of ``limit`` rows at any depth (keyset pagination)."""

    created_at: float
    task_id: str


_PAGE_ORDER = "ORDER BY created_at DESC, task_id DESC"


def task_page(
    db: sqlite3.Connection,
    *,
    user: str | None,
    states: Sequence[TaskState] = (),
    limit: int,
    after: PageCursor | None = None,
    offset: int = 0,
) -> tuple[list[TaskView], int, PageCursor | None]:
    """One page of tasks, newest first (``user``'s only, unless None; in ``states``, if
    any), starting after ``after`` (or skipping ``offset`` rows); the number the filter
    matches (from the user_views projection's counts); and the cursor of the next page
    (None: this is the last)."""
    base: list[str] = []
    params: list[object] = []
    if user is not None:
        base.append("user = ?")
        params.append(user)
    total = _count(db, base, params, states)
    walk = _Walk(db, base, params, states or [None])
    if offset and after is None:
        # Skip by keys alone (index-only walks, no view read), then page from there as a
        # cursor would: a deep offset costs about what its cursor costs.
        after = walk.key_at(offset)
        if after is None:
            return [], total, None
    # One more row than the page: whether a next page exists, without counting.
    rows = walk.rows("created_at, task_id, view", after, limit + 1)
    page = rows[:limit]
    more = len(rows) > limit
    return [_decode_view(view) for _, _, view in page], total, PageCursor(page[-1][0], page[-1][1]) if more else None


class _Walk:
    """The filtered task list as index walks: one per state (tasks_state_created), merged
    in page order. With IN (...) SQLite would sort every matching row to return the first
    ``limit``."""

    def __init__(self, db: sqlite3.Connection, base: list[str], params: list[object],
                 each: Sequence[TaskState | None]) -> None:
        self.db, self.base, self.params, self.each = db, base, params, each

    def _query(self, columns: str, state: TaskState | None, after: PageCursor | None,
               tail: str) -> tuple[str, list[object]]:
        where = [*self.base, *([] if state is None else ["state = ?"])]
        params = [*self.params, *([] if state is None else [state.value])]
        if after is not None:
            where.append("(created_at, task_id) < (?, ?)")
            params += [after.created_at, after.task_id]
        cond = " AND ".join(where) if where else "1"
        return f"SELECT {columns} FROM tasks WHERE {cond} {_PAGE_ORDER} {tail}", params

    def rows(self, columns: str, after: PageCursor | None, limit: int) -> list[Any]:
        """The first ``limit`` rows after ``after`` (created_at and task_id first)."""
        runs = []
        for state in self.each:
            sql, params = self._query(columns, state, after, "LIMIT ?")
            runs.append(self.db.execute(sql, [*params, limit]).fetchall())
        if len(runs) == 1:
            return runs[0]
        return list(itertools.islice(heapq.merge(*runs, key=lambda r: (-r[0], _desc(r[1]))), limit))

    def key_at(self, offset: int) -> PageCursor | None:
        """The cursor of the row just before the page at ``offset`` (None: past the end)."""
        if len(self.each) == 1:  # one index walk: SQLite skips the rows itself
            sql, params = self._query("created_at, task_id", self.each[0], None, "LIMIT 1 OFFSET ?")
            row = self.db.execute(sql, [*params, offset - 1]).fetchone()
        else:
            keys = self.rows("created_at, task_id", None, offset)
            row = keys[-1] if len(keys) == offset else None
        return None if row is None else PageCursor(row[0], row[1])


def _count(db: sqlite3.Connection, base: list[str], params: list[object], states: Sequence[TaskState]) -> int:
    # From the per-user counts the user_views projection keeps (a row per user and
    # state), not count(*): that walked an index of every task on each page, 100k
    # entries at 100k tasks, and eight listers kept both cores busy with it.
    where = [*base, *([f"state IN ({','.join('?' * len(states))})"] if states else [])]
    cond = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT coalesce(sum(n), 0) FROM user_task_counts {cond}"
    return int(db.execute(sql, [*params, *(s.value for s in states)]).fetchone()[0])


def waiting_count(db: sqlite3.Connection, user: str) -> int:
    """How many of ``user``'s tasks wait in the queue (QUEUED or PENDING_RESOURCES)."""
    return _count(db, ["user = ?"], [user], [s for s in TaskState if s.is_waiting()])


def _desc(task_id: str) -> tuple[int, ...]:
    """A sort key that orders task ids descending inside an ascending merge (the closing
    1 puts a prefix after the longer ids it starts, as descending order wants)."""
    return (*(-ord(c) for c in task_id), 1)


def all_tasks(db: sqlite3.Connection) -> list[TaskView]:
    """Every task, oldest first (replay's picture of a moment)."""
    return [_decode_view(view) for (view,) in db.execute("SELECT view FROM tasks ORDER BY created_at, task_id")]


def tasks_in_states(db: sqlite3.Connection, states: Sequence[TaskState]) -> list[TaskView]:
    """Every task in one of ``states`` (an index walk per state: ``tasks_state_created``)."""
    rows = db.execute(f"SELECT view FROM tasks WHERE state IN ({','.join('?' * len(states))})",
                      [s.value for s in states])
    return [_decode_view(view) for (view,) in rows]


def task_views(db: sqlite3.Connection, task_ids: Sequence[str]) -> dict[str, TaskView]:
    """The views of ``task_ids`` that exist, by id (the retention policy's look)."""
    return TASK_FOLD.load_many(db, list(task_ids))


def task_workloads(db: sqlite3.Connection, task_ids: Sequence[str]) -> dict[str, str]:
    """Each task's workload, by id, without decoding views (the ETAs of a long queue)."""
    found: dict[str, str] = {}
    for k in range(0, len(task_ids), 500):  # well under SQLite's limit on parameters
        chunk = task_ids[k:k + 500]
        found.update(db.execute(f"SELECT task_id, workload FROM tasks WHERE task_id IN ({','.join('?' * len(chunk))})",
                                chunk).fetchall())
    return found


def unfinished_tasks(db: sqlite3.Connection) -> list[TaskView]:
    """Every task not yet in a terminal state."""
    terminal = tuple(s.value for s in TaskState if s.is_terminal())
    rows = db.execute(f"SELECT view FROM tasks WHERE state NOT IN ({','.join('?' * len(terminal))})", terminal)
    return [_decode_view(view) for (view,) in rows]


class TaskCounts(msgspec.Struct, kw_only=True):
    """Figures for /metrics: unfinished tasks by state, attempts started, failed tasks by kind."""

    unfinished_by_state: dict[str, int]
    attempts: int
    failed_by_kind: dict[str, int]


def task_counts(db: sqlite3.Connection) -> TaskCounts:
    return TaskCounts(
        unfinished_by_state=dict(db.execute("SELECT state, count(*) FROM queue GROUP BY state").fetchall()),
        attempts=int(db.execute("SELECT count(*) FROM attempts").fetchone()[0]),
        failed_by_kind={kind or "UNKNOWN": n for kind, n in db.execute(
            "SELECT failure_kind, count(*) FROM tasks WHERE state = 'FAILED' GROUP BY failure_kind")},
    )


class TaskAt(msgspec.Struct, frozen=True, kw_only=True):
    """A task as replay's ``at`` shows it (``attempts``: the latest attempt's number)."""

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


def tasks_at(db: sqlite3.Connection) -> list[TaskAt]:
    """Every task, oldest first, from the ``tasks`` table's columns."""
    return [
        TaskAt(task_id=task_id, user=user, workload=workload, state=state, priority=priority, attempts=attempts,
               created_at=created_at, updated_at=updated_at, wait_reason=wait_reason, failure_kind=failure_kind,
               next_run_at=next_run_at)
        for task_id, user, workload, state, priority, attempts, created_at, updated_at, wait_reason, failure_kind,
        next_run_at in db.execute(
            "SELECT task_id, user, workload, state, priority, latest_attempt_no, created_at, "
            "updated_at, wait_reason, failure_kind, next_run_at FROM tasks "
            "ORDER BY created_at, task_id"
        )
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


def running_attempts(db: sqlite3.Connection) -> list[RunningAttempt]:
    """The newest attempt of every task that may hold a Ray job (SUBMITTING, SUBMITTED,
    RUNNING, CANCELING) and has not ended, in arrival order."""
    return [
        RunningAttempt(task_id=task_id, user=user, attempt_no=attempt_no, submission_id=submission_id,
                       task_state=task_state, ray_status=ray_status, nnodes=nnodes,
                       n_gpus_per_node=n_gpus_per_node, started_at=started_at)
        for task_id, user, attempt_no, submission_id, task_state, ray_status, nnodes, n_gpus_per_node, started_at
        in db.execute(
            "SELECT a.task_id, t.user, a.attempt_no, a.submission_id, t.state, a.ray_status, "
            "q.nnodes, q.n_gpus_per_node, a.started_at "
            "FROM tasks t JOIN attempts a ON a.task_id = t.task_id "
            "AND a.attempt_no = t.latest_attempt_no "
            "JOIN queue q ON q.task_id = t.task_id "
            "WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING', 'CANCELING') "
            "AND a.ended_at IS NULL ORDER BY q.seq"
        )
    ]
