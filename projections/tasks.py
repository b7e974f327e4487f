"""Task state with its attempts: the pure fold and its ``tasks``/``attempts`` tables.

``evolve_task`` is the one fold of a task's events. The API's read model, the reactor's
memory and the replay tool all use it, so they cannot disagree about what a task is.
"""

from __future__ import annotations

import sqlite3
import msgspec

from argus.events import (
    AttemptEnded,
    AttemptRunning,
    AttemptStarting,
    AttemptSubmitted,
    Demand,
    FailureKind,
    Recorded,
    RetryScheduled,
    TaskCanceled,
    TaskCancelRequested,
    TaskDeferred,
    TaskFailed,
    TaskSubmitted,
    TaskSucceeded,
)
from argus.lifecycle import TaskState, next_state
from projections.base import EntityProjection

__all__ = [
    "AttemptView",
    "TASK_EVENT_TYPES",
    "TaskView",
    "TasksProjection",
    "evolve_task",
    "load_task",
]

TASK_EVENT_TYPES = frozenset(
    {
        "TaskSubmitted",
        "TaskDeferred",
        "AttemptStarting",
        "AttemptSubmitted",
        "AttemptRunning",
        "AttemptEnded",
        "RetryScheduled",
        "TaskSucceeded",
        "TaskFailed",
        "TaskCancelRequested",
        "TaskCanceled",
    }
)


class AttemptView(msgspec.Struct, frozen=True, kw_only=True):
    attempt_no: int
    submission_id: str
    # STARTING (intent recorded) | SUBMITTED | RUNNING | SUCCEEDED | FAILED | STOPPED | ...
    ray_status: str
    failure_kind: FailureKind | None = None
    evidence: str = ""
    exit_code: int | None = None
    decided_at: float
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    recovered: bool = False

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


class TaskView(msgspec.Struct, frozen=True, kw_only=True):
    """A task as the log says it is now."""

    task_id: str
    user: str
    workload: str
    kind: str
    state: TaskState
    priority: int
    max_attempts: int
    demand: Demand
    seq: int  # log position of TaskSubmitted: the FIFO order
    created_at: float
    updated_at: float
    stream_version: int
    attempts: tuple[AttemptView, ...] = ()
    next_run_at: float | None = None
    failure_kind: FailureKind | None = None
    error_summary: str = ""
    wait_reason: str | None = None
    wait_message: str = ""
    waiting_since: float | None = None
    cancel_requested_by: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def latest_attempt(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None


_replace = msgspec.structs.replace


def _with_attempt(view: TaskView, attempt_no: int, **changes: object) -> tuple[AttemptView, ...]:
    return tuple(_replace(a, **changes) if a.attempt_no == attempt_no else a for a in view.attempts)


def evolve_task(view: TaskView | None, rec: Recorded) -> TaskView:
    """Apply one recorded task event. Raises IllegalTransition for an event the state
    does not allow, so an inline projection refuses to record it."""
    event = rec.event
    state = next_state(view.state if view else None, rec.type)
    at = rec.recorded_at
    if isinstance(event, TaskSubmitted):
        return TaskView(
            task_id=event.task_id,
            user=event.user,
            workload=event.workload,
            kind=event.kind,
            state=state,
            priority=event.priority,
            max_attempts=event.max_attempts,
            demand=event.demand,
            seq=rec.position,
            created_at=event.submitted_at,
            updated_at=at,
            stream_version=rec.version,
            waiting_since=event.submitted_at,
            warnings=tuple(event.warnings),
        )
    assert view is not None  # next_state raised otherwise
    common = {"state": state, "updated_at": at, "stream_version": rec.version}
    if isinstance(event, TaskDeferred):
        return _replace(view, **common, wait_reason=event.reason, wait_message=event.message)
    if isinstance(event, AttemptStarting):
        attempt = AttemptView(
            attempt_no=event.attempt_no,
            submission_id=event.submission_id,
            ray_status="STARTING",
            decided_at=event.decided_at,
        )
        return _replace(
            view, **common, attempts=(*view.attempts, attempt), next_run_at=None,
            wait_reason=None, wait_message="", waiting_since=None,
        )
    if isinstance(event, AttemptSubmitted):
        attempts = _with_attempt(
            view, event.attempt_no, ray_status="SUBMITTED", submitted_at=event.submitted_at,
            recovered=event.recovered,
        )
        return _replace(view, **common, attempts=attempts)
    if isinstance(event, AttemptRunning):
        attempts = _with_attempt(view, event.attempt_no, ray_status="RUNNING", started_at=event.started_at)
        return _replace(view, **common, attempts=attempts)
    if isinstance(event, AttemptEnded):
        attempts = _with_attempt(
            view, event.attempt_no, ray_status=event.ray_status, failure_kind=event.failure_kind,
            evidence=event.evidence, exit_code=event.exit_code, ended_at=event.ended_at,
        )
        return _replace(view, **common, attempts=attempts)
    if isinstance(event, RetryScheduled):
        return _replace(
            view, **common, next_run_at=event.next_run_at, failure_kind=event.failure_kind,
            wait_reason="retry_backoff",
            wait_message=f"attempt {event.failed_attempt_no} failed ({event.failure_kind.value}); "
            f"retry in {event.delay_s:.0f}s",
            waiting_since=at,
        )
    if isinstance(event, TaskSucceeded):
        return _replace(view, **common, failure_kind=None, error_summary="")
    if isinstance(event, TaskFailed):
        return _replace(
            view, **common, failure_kind=event.failure_kind, error_summary=event.error_summary
        )
    if isinstance(event, TaskCancelRequested):
        return _replace(view, **common, cancel_requested_by=event.by)
    if isinstance(event, TaskCanceled):
        return _replace(view, **common, failure_kind=FailureKind.CANCELED, next_run_at=None,
                        wait_reason=None, wait_message="")
    raise TypeError(f"not a task event: {rec.type}")


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


_UPSERT_TASK = "INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_UPSERT_ATTEMPT = "INSERT OR REPLACE INTO attempts VALUES (?,?,?,?,?,?,?,?,?)"


def load_task(db: sqlite3.Connection, task_id: str) -> TaskView | None:
    row = db.execute("SELECT view FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    return _decode_view(row[0]) if row else None


class TasksProjection(EntityProjection[TaskView]):
    """``tasks`` (one row per task, with the whole TaskView) and ``attempts``."""

    name = "tasks"
    version = 1
    tables = ("tasks", "attempts")
    handles = TASK_EVENT_TYPES

    def key(self, rec: Recorded) -> str:
        return rec.event.task_id  # type: ignore[attr-defined,no-any-return]

    def evolve(self, entity: TaskView | None, rec: Recorded) -> TaskView:
        return evolve_task(entity, rec)

    def load(self, db: sqlite3.Connection, key: str) -> TaskView | None:
        return load_task(db, key)

    def save(self, db: sqlite3.Connection, key: str, before: TaskView | None, after: TaskView | None) -> None:
        assert after is not None
        db.execute(_UPSERT_TASK, _task_row(after))
        # Only the newest attempt can have changed: events touch the current attempt.
        if after.attempts and (before is None or before.attempts != after.attempts):
            changed = [a for a in after.attempts if before is None or a not in before.attempts]
            db.executemany(_UPSERT_ATTEMPT, (_attempt_row(key, a) for a in changed))

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        db.executemany(_UPSERT_TASK, (_task_row(v) for v in entities.values()))
        db.executemany(
            _UPSERT_ATTEMPT,
            (_attempt_row(v.task_id, a) for v in entities.values() for a in v.attempts),
        )
