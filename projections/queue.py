"""The queue: every unfinished task with what the scheduler needs, and its readers.

Kept from the task fold (``TaskView``): a row lives from TaskSubmitted until the task is
terminal; ``waiting`` marks the ones not yet handed to Ray (QUEUED, PENDING_RESOURCES).
Keeping the row while a task runs lets a retry put it back in its original place
(``seq``) without re-reading its history.
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.events import Demand
from projections.base import Change, EntityProjection, insert_sql, upsert_sql
from projections.tasks import TASK_FOLD, TaskView

__all__ = [
    "ORDER_COLUMNS", "QueueEntry", "QueuePage", "QueueProjection", "queue_row", "waiting_ahead",
    "waiting_count", "waiting_entry", "waiting_page", "waiting_tasks",
]


class QueueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A waiting task as the queue shows it. ``position`` (1-based) is its place in the
    order the configured policy considers tasks (``argus.scheduler.queue_order``), set by
    whoever orders the queue; ``task_id``/``user`` are None where the reader may not see
    whose task it is. ``seq`` is the submission's log position (arrival)."""

    position: int = 0
    task_id: str | None
    user: str | None
    priority: int
    state: str
    demand: Demand
    seq: int
    wait_reason: str | None = None
    wait_message: str = ""
    next_run_at: float | None = None
    waiting_since: float | None = None
    expected_start: float | None = None  # its ETA, set by whoever runs the policy forward (the API)
    # and the 80 % interval of its start (argus.scheduler.eta_range; latest None: no upper end)
    start_earliest: float | None = None
    start_latest: float | None = None


class QueuePage(msgspec.Struct, kw_only=True):
    """A page of the queue in a policy's order; ``total`` waiting in all; ``next_cursor``
    to pass back as ``cursor`` for the next page (null on the last)."""

    items: list[QueueEntry]
    total: int
    limit: int
    next_cursor: str | None = None


# An order is a sequence of (field, descending) over these columns (argus.scheduler.order).
ORDER_COLUMNS = frozenset({"seq", "priority"})
_ENTRY_COLUMNS = (
    "task_id, user, priority, state, nnodes, n_gpus_per_node, cpus_per_node, seq, "
    "next_run_at, wait_reason, wait_message, waiting_since"
)


def _entry(r: Sequence[object]) -> QueueEntry:
    return QueueEntry(task_id=r[0], user=r[1], priority=r[2], state=r[3],  # type: ignore[arg-type]
                      demand=Demand(nnodes=r[4], n_gpus_per_node=r[5], cpus_per_node=r[6]),  # type: ignore[arg-type]
                      seq=r[7], next_run_at=r[8], wait_reason=r[9], wait_message=r[10] or "",  # type: ignore[arg-type]
                      waiting_since=r[11])  # type: ignore[arg-type]


def _order_by(order: Sequence[tuple[str, bool]]) -> str:
    if not order or any(field not in ORDER_COLUMNS for field, _ in order):
        raise ValueError(f"order over {sorted(ORDER_COLUMNS)} expected, got {list(order)}")
    return ", ".join(f"{field} DESC" if desc else field for field, desc in order)


def waiting_tasks(db: sqlite3.Connection) -> list[QueueEntry]:
    """Every waiting task (QUEUED, PENDING_RESOURCES) in arrival order."""
    return [_entry(r) for r in db.execute(f"SELECT {_ENTRY_COLUMNS} FROM queue WHERE waiting = 1 ORDER BY seq")]


def waiting_page(db: sqlite3.Connection, order: Sequence[tuple[str, bool]], *, limit: int,
                 after: Sequence[int] | None = None) -> list[QueueEntry]:
    """Up to ``limit`` waiting tasks in ``order``, strictly after the one whose order
    values are ``after``. Each part below is one seek into the order's index: for keys
    (k1, k2) after (v1, v2) that is k1 = v1 AND k2 beyond v2, then k1 beyond v1."""
    by = _order_by(order)
    if after is None:
        return [_entry(r) for r in db.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM queue WHERE waiting = 1 ORDER BY {by} LIMIT ?", (limit,))]
    found: list[QueueEntry] = []
    for depth in range(len(order) - 1, -1, -1):
        if len(found) >= limit:
            break
        cond, params = _beyond(order, after, depth, ahead=False)
        found += [_entry(r) for r in db.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM queue WHERE waiting = 1 AND {cond} ORDER BY {by} LIMIT ?",
            (*params, limit - len(found)))]
    return found


def waiting_ahead(db: sqlite3.Connection, order: Sequence[tuple[str, bool]], values: Sequence[int]) -> int:
    """How many waiting tasks come before the one whose order values are ``values``."""
    _order_by(order)
    total = 0
    for depth in range(len(order)):
        cond, params = _beyond(order, values, depth, ahead=True)
        total += int(db.execute(f"SELECT count(*) FROM queue WHERE waiting = 1 AND {cond}", params).fetchone()[0])
    return total


def waiting_count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count(*) FROM queue WHERE waiting = 1").fetchone()[0])


def waiting_entry(db: sqlite3.Connection, task_id: str) -> QueueEntry | None:
    """The task's queue entry while it waits, else None."""
    row = db.execute(f"SELECT {_ENTRY_COLUMNS} FROM queue WHERE waiting = 1 AND task_id = ?", (task_id,)).fetchone()
    return _entry(row) if row else None


def _beyond(order: Sequence[tuple[str, bool]], values: Sequence[int], depth: int,
            *, ahead: bool) -> tuple[str, list[int]]:
    """Rows equal to ``values`` on the first ``depth`` keys and strictly past (or, with
    ``ahead``, strictly before) them on key ``depth``, in the order's direction."""
    parts = [f"{field} = ?" for field, _ in order[:depth]]
    field, desc = order[depth]
    parts.append(f"{field} {'>' if desc == ahead else '<'} ?")
    return " AND ".join(parts), [*values[:depth], values[depth]]


def queue_row(v: TaskView) -> tuple[object, ...] | None:
    """The task's queue row, or None when it is terminal (no longer queued)."""
    if v.state.is_terminal():
        return None
    d = v.demand
    return (
        v.task_id, v.seq, v.user, v.priority, v.state.value, int(v.state.is_waiting()),
        d.nnodes, d.n_gpus_per_node, d.cpus_per_node, v.next_run_at, v.wait_reason,
        v.wait_message, v.waiting_since,
    )


# Who, what and where in the FIFO order are fixed at submission; state and waiting change.
_COLUMNS = (
    "task_id, seq, user, priority, state, waiting, nnodes, n_gpus_per_node, cpus_per_node, "
    "next_run_at, wait_reason, wait_message, waiting_since"
)
_WAITING = _COLUMNS.split(", ").index("waiting")  # its place in a queue row
_FIXED = frozenset({"seq", "user", "priority", "nnodes", "n_gpus_per_node", "cpus_per_node"})
_INSERT = insert_sql("queue", _COLUMNS)
_UPSERT = upsert_sql("queue", _COLUMNS, "task_id", _FIXED)
# For a row that stays waiting (or not): ``waiting`` left out of the SET leaves the
# ``queue_order`` index unwritten.
_UPDATE_SAME_ORDER = upsert_sql("queue", _COLUMNS, "task_id", _FIXED | {"waiting"})


class QueueProjection(EntityProjection[TaskView]):
    name = "queue"
    # v2: folded from TaskView (one fold for three projections); the retry wait message
    # is now the task's own.
    version = 2
    tables = ("queue",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        upserts: list[tuple[object, ...]] = []
        updates: list[tuple[object, ...]] = []
        deletes: list[tuple[str]] = []
        for key, before, after in changes:
            assert after is not None
            row = queue_row(after)
            if row is None:
                if before is not None and not before.state.is_terminal():
                    deletes.append((key,))
                continue
            old = queue_row(before) if before is not None else None
            if old is None or old[_WAITING] != row[_WAITING]:
                upserts.append(row)
            elif row != old:
                updates.append(row)
        if upserts:
            db.executemany(_UPSERT, upserts)
        if updates:
            db.executemany(_UPDATE_SAME_ORDER, updates)
        if deletes:
            db.executemany("DELETE FROM queue WHERE task_id = ?", deletes)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        rows = (queue_row(v) for v in entities.values())
        db.executemany(_INSERT, (r for r in rows if r is not None))
