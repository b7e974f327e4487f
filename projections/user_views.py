"""Per-user views: how many tasks each user has in each state.

Kept from the task fold (``TaskView``). Recent tasks per user are read from ``tasks``
through its (user, created_at) index; this projection keeps the counts, which would
otherwise need a scan of every task.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

from projections.base import EntityProjection
from projections.tasks import TASK_FOLD, TaskView

__all__ = ["UserViewsProjection"]


class UserViewsProjection(EntityProjection[TaskView]):
    name = "user_views"
    version = 1
    tables = ("user_task_counts",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, key: str, before: TaskView | None, after: TaskView | None) -> None:
        assert after is not None
        if before is not None:
            if before.state is after.state:
                return
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

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        counts = Counter((v.user, v.state.value) for v in entities.values())
        db.executemany(
            "INSERT INTO user_task_counts VALUES (?, ?, ?)",
            ((user, state, n) for (user, state), n in counts.items()),
        )
