"""The queue: every unfinished task with what the scheduler needs, in FIFO order.

A row lives from TaskSubmitted until the task is terminal; ``waiting`` marks the ones not
yet handed to Ray (QUEUED, PENDING_RESOURCES). Keeping the row while a task runs lets a
retry put it back in its original place (``seq``) without re-reading its history.
"""

from __future__ import annotations

import sqlite3

import msgspec

from argus.events import (
    AttemptStarting,
    Demand,
    Recorded,
    RetryScheduled,
    TaskDeferred,
    TaskSubmitted,
)
from argus.lifecycle import TaskState, next_state
from projections.base import EntityProjection
from projections.tasks import TASK_EVENT_TYPES

__all__ = ["QueueEntry", "QueueProjection", "evolve_queue_entry"]


class QueueEntry(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    seq: int
    user: str
    priority: int
    state: TaskState
    demand: Demand
    next_run_at: float | None = None
    wait_reason: str | None = None
    wait_message: str = ""
    waiting_since: float | None = None

    @property
    def waiting(self) -> bool:
        return self.state.is_waiting()


_replace = msgspec.structs.replace


def evolve_queue_entry(entry: QueueEntry | None, rec: Recorded) -> QueueEntry | None:
    event = rec.event
    state = next_state(entry.state if entry else None, rec.type)
    if isinstance(event, TaskSubmitted):
        return QueueEntry(
            task_id=event.task_id, seq=rec.position, user=event.user, priority=event.priority,
            state=state, demand=event.demand, waiting_since=event.submitted_at,
        )
    assert entry is not None
    if state.is_terminal():
        return None
    if isinstance(event, TaskDeferred):
        return _replace(entry, state=state, wait_reason=event.reason, wait_message=event.message)
    if isinstance(event, AttemptStarting):
        return _replace(entry, state=state, next_run_at=None, wait_reason=None,
                        wait_message="", waiting_since=None)
    if isinstance(event, RetryScheduled):
        return _replace(
            entry, state=state, next_run_at=event.next_run_at, wait_reason="retry_backoff",
            wait_message=f"retry after {event.failure_kind.value}", waiting_since=rec.recorded_at,
        )
    return entry if entry.state is state else _replace(entry, state=state)


def _row(e: QueueEntry) -> tuple[object, ...]:
    d = e.demand
    return (
        e.task_id, e.seq, e.user, e.priority, e.state.value, int(e.waiting), d.nnodes,
        d.n_gpus_per_node, d.cpus_per_node, e.next_run_at, e.wait_reason, e.wait_message,
        e.waiting_since,
    )


def _entry(row: tuple) -> QueueEntry:  # type: ignore[type-arg]
    return QueueEntry(
        task_id=row[0], seq=row[1], user=row[2], priority=row[3], state=TaskState(row[4]),
        demand=Demand(nnodes=row[6], n_gpus_per_node=row[7], cpus_per_node=row[8]),
        next_run_at=row[9], wait_reason=row[10], wait_message=row[11], waiting_since=row[12],
    )


_UPSERT = "INSERT OR REPLACE INTO queue VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"


class QueueProjection(EntityProjection[QueueEntry]):
    name = "queue"
    version = 1
    tables = ("queue",)
    handles = TASK_EVENT_TYPES

    def key(self, rec: Recorded) -> str:
        return rec.event.task_id  # type: ignore[attr-defined,no-any-return]

    def evolve(self, entity: QueueEntry | None, rec: Recorded) -> QueueEntry | None:
        return evolve_queue_entry(entity, rec)

    def load(self, db: sqlite3.Connection, key: str) -> QueueEntry | None:
        # A terminal task has no row; events after the end are refused by the tasks fold.
        row = db.execute("SELECT * FROM queue WHERE task_id = ?", (key,)).fetchone()
        return _entry(row) if row else None

    def save(self, db: sqlite3.Connection, key: str, before: QueueEntry | None, after: QueueEntry | None) -> None:
        if after is None:
            db.execute("DELETE FROM queue WHERE task_id = ?", (key,))
        elif after != before:
            db.execute(_UPSERT, _row(after))

    def write_all(self, db: sqlite3.Connection, entities: dict[str, QueueEntry]) -> None:
        db.executemany(_UPSERT, (_row(e) for e in entities.values()))

