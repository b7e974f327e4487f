"""Task state with its attempts in the ``tasks``/``attempts`` tables: the view and its fold
(``projections.task_view``, named here too) kept as rows, read back by ``load_task``.
"""

from __future__ import annotations

import operator
import sqlite3
from typing import Sequence

import msgspec

from projections.base import Change, EntityFold, EntityProjection, insert_sql, upsert_sql
from projections.task_view import TASK_EVENT_TYPES, AttemptView, TaskView, evolve_task

__all__ = [
    "AttemptView",
    "TASK_EVENT_TYPES",
    "TASK_FOLD",
    "TaskFold",
    "TaskView",
    "TasksProjection",
    "evolve_task",
    "load_task",
]

_encode = msgspec.json.Encoder().encode
_decode_view = msgspec.json.Decoder(TaskView).decode


def _task_row(v: TaskView) -> tuple[object, ...]:
    return (
        v.task_id, v.user, v.workload, v.kind, v.state.value, v.priority, v.created_at,
        v.updated_at, v.next_run_at, len(v.attempts),
        v.failure_kind.value if v.failure_kind else None, v.error_summary or None,
        v.wait_reason, v.stream_version, _encode(v),
    )


def _attempt_row(task_id: str, a: AttemptView) -> tuple[object, ...]:
    return (
        task_id, a.attempt_no, a.submission_id, a.ray_status,
        a.failure_kind.value if a.failure_kind else None, a.evidence or None, a.exit_code,
        a.started_at, a.ended_at,
    )


_TASK_COLUMNS = (
    "task_id, user, workload, kind, state, priority, created_at, updated_at, next_run_at, "
    "latest_attempt_no, failure_kind, error_summary, wait_reason, stream_version, view"
)
_ATTEMPT_COLUMNS = (
    "task_id, attempt_no, submission_id, ray_status, failure_kind, evidence, exit_code, started_at, ended_at"
)


# A task's user, workload, kind, priority and creation time are set by TaskSubmitted and
# never change (the (user, created_at) index is written once); an attempt's submission id
# is set when it starts.
_FIXED_TASK_COLUMNS = frozenset({"user", "workload", "kind", "priority", "created_at"})
_UPSERT_TASK = upsert_sql("tasks", _TASK_COLUMNS, "task_id", _FIXED_TASK_COLUMNS)
# The same, for a task whose state did not change (a repeated deferral, say): ``state``
# left out of the SET leaves the ``tasks_state`` index unwritten.
_UPDATE_TASK_SAME_STATE = upsert_sql("tasks", _TASK_COLUMNS, "task_id", _FIXED_TASK_COLUMNS | {"state"})
_INSERT_TASK = insert_sql("tasks", _TASK_COLUMNS)
_INSERT_ATTEMPT = insert_sql("attempts", _ATTEMPT_COLUMNS)
_UPSERT_ATTEMPT = upsert_sql("attempts", _ATTEMPT_COLUMNS, "task_id, attempt_no", frozenset({"submission_id"}))


def _changed_attempts(before: TaskView | None, after: TaskView) -> list[AttemptView]:
    """Attempts that are new or changed (events touch the newest attempt)."""
    if before is None:
        return list(after.attempts)
    if before.attempts == after.attempts:
        return []
    return [a for a in after.attempts if a not in before.attempts]


def load_task(db: sqlite3.Connection, task_id: str) -> TaskView | None:
    row = db.execute("SELECT view FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    return _decode_view(row[0]) if row else None


class TaskFold(EntityFold[TaskView]):
    """Task events -> ``TaskView``; its home is the ``tasks`` table (``view`` column)."""

    name = "task"
    entity = TaskView
    handles = TASK_EVENT_TYPES
    home = "tasks"

    # The C attrgetter and the bare fold function, not methods that wrap them: a rebuild
    # calls both once per event.
    key = staticmethod(operator.attrgetter("event.task_id"))  # type: ignore[assignment]
    evolve = staticmethod(evolve_task)  # type: ignore[assignment]

    def load(self, db: sqlite3.Connection, key: str) -> TaskView | None:
        return load_task(db, key)

    def load_many(self, db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, TaskView]:
        found: dict[str, TaskView] = {}
        for k in range(0, len(keys), 500):  # well under SQLite's limit on parameters
            chunk = keys[k:k + 500]
            sql = f"SELECT task_id, view FROM tasks WHERE task_id IN ({','.join('?' * len(chunk))})"
            for task_id, view in db.execute(sql, chunk):
                found[task_id] = _decode_view(view)
        return found


TASK_FOLD = TaskFold()


class TasksProjection(EntityProjection[TaskView]):
    """``tasks`` (one row per task, with the whole TaskView) and ``attempts``."""

    name = "tasks"
    # v2: ``view`` JSON without default values; v3: name, total_steps; v4: preempting_since;
    # v5: attempts' nodes; v6: attempts' checkpoints; v7: attempts' first_step_at
    version = 7
    tables = ("tasks", "attempts")
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        moved: list[tuple[object, ...]] = []
        stayed: list[tuple[object, ...]] = []
        for _, before, after in changes:
            assert after is not None
            (stayed if before is not None and before.state is after.state else moved).append(_task_row(after))
        if moved:
            db.executemany(_UPSERT_TASK, moved)
        if stayed:
            db.executemany(_UPDATE_TASK_SAME_STATE, stayed)
        attempts = [
            _attempt_row(key, a)
            for key, before, after in changes if after is not None
            for a in _changed_attempts(before, after)
        ]
        if attempts:
            db.executemany(_UPSERT_ATTEMPT, attempts)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        db.executemany(_INSERT_TASK, (_task_row(v) for v in entities.values()))
        db.executemany(
            _INSERT_ATTEMPT,
            (_attempt_row(v.task_id, a) for v in entities.values() for a in v.attempts),
        )
