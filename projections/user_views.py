"""Per-user views: how many tasks each user has in each state.

Recent tasks per user are read from ``tasks`` through its (user, created_at) index; this
projection keeps the counts, which would otherwise need a scan of every task.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

import msgspec

from argus.events import Recorded, TaskSubmitted
from argus.lifecycle import TaskState, next_state
from projections.base import EntityProjection
from projections.tasks import TASK_EVENT_TYPES

__all__ = ["TaskOwnerState", "UserViewsProjection"]


class TaskOwnerState(msgspec.Struct, frozen=True):
    user: str
    state: TaskState


class UserViewsProjection(EntityProjection[TaskOwnerState]):
    name = "user_views"
    version = 1
    tables = ("user_task_counts",)
    handles = TASK_EVENT_TYPES

    def key(self, rec: Recorded) -> str:
        return rec.event.task_id  # type: ignore[attr-defined,no-any-return]

    def evolve(self, entity: TaskOwnerState | None, rec: Recorded) -> TaskOwnerState:
        state = next_state(entity.state if entity else None, rec.type)
        if isinstance(rec.event, TaskSubmitted):
            return TaskOwnerState(rec.event.user, state)
        assert entity is not None
        return entity if entity.state is state else TaskOwnerState(entity.user, state)

    def load(self, db: sqlite3.Connection, key: str) -> TaskOwnerState | None:
        # The tasks table is written after this projection in the same transaction, so it
        # still holds the state before this event.
        row = db.execute("SELECT user, state FROM tasks WHERE task_id = ?", (key,)).fetchone()
        return TaskOwnerState(row[0], TaskState(row[1])) if row else None

    def save(
        self, db: sqlite3.Connection, key: str,
        before: TaskOwnerState | None, after: TaskOwnerState | None,
    ) -> None:
        if before == after or after is None:
            return
        if before is not None:
            db.execute(
                "UPDATE user_task_counts SET n = n - 1 WHERE user = ? AND state = ?",
                (before.user, before.state.value),
            )
            # Drop empty rows so that the inline table equals a rebuild's.
            db.execute(
                "DELETE FROM user_task_counts WHERE user = ? AND state = ? AND n = 0",
                (before.user, before.state.value),
            )
        db.execute(
            "INSERT INTO user_task_counts VALUES (?, ?, 1) "
            "ON CONFLICT (user, state) DO UPDATE SET n = n + 1",
            (after.user, after.state.value),
        )

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskOwnerState]) -> None:
        counts = Counter((e.user, e.state.value) for e in entities.values())
        db.executemany(
            "INSERT INTO user_task_counts VALUES (?, ?, ?)",
            ((user, state, n) for (user, state), n in counts.items()),
        )
