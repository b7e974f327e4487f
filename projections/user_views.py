"""Per-user views: how many tasks each user has in each state.

Kept from the task fold (``TaskView``). Recent tasks per user are read from ``tasks``
through its (user, created_at) index; this projection keeps the counts, which would
otherwise need a scan of every task.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Sequence

from projections.base import Change, EntityProjection
from projections.tasks import TASK_FOLD, TaskView

__all__ = ["UserViewsProjection"]


_ADD_COUNTS = (
    "INSERT INTO user_task_counts VALUES (?, ?, ?) ON CONFLICT (user, state) DO UPDATE SET n = n + excluded.n"
)


class UserViewsProjection(EntityProjection[TaskView]):
    name = "user_views"
    version = 1
    tables = ("user_task_counts",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        # Net moves between (user, state) counts over the whole transaction.
        delta: Counter[tuple[str, str]] = Counter()
        for _, before, after in changes:
            assert after is not None
            if before is not None:
                if before.state is after.state:
                    continue
                delta[(before.user, before.state.value)] -= 1
            delta[(after.user, after.state.value)] += 1
        rows = [(user, state, n) for (user, state), n in delta.items() if n]
        if not rows:
            return
        db.executemany(
            _ADD_COUNTS,
            rows,
        )
        # Drop emptied rows so that the inline table equals a rebuild's.
        emptied = [(user, state) for user, state, n in rows if n < 0]
        if emptied:
            db.executemany("DELETE FROM user_task_counts WHERE user = ? AND state = ? AND n = 0", emptied)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        counts = Counter((v.user, v.state.value) for v in entities.values())
        db.executemany(  # adds up across the parts of a parallel rebuild
            _ADD_COUNTS,
            ((user, state, n) for (user, state), n in counts.items()),
        )
