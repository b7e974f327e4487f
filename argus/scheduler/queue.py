"""The queue as users are shown it: waiting tasks in the order the configured policy will
consider them (``argus.scheduler.order``), numbered from 1, a page at a time.

The API's ``/queue`` and ``queue_position``, the WebUI (through the API) and
``argus replay at`` all read it here, so none of them can disagree with the reactor. Each
page is a walk down the order's index from a cursor (keyset), so page 100 of a queue of
10,000 costs what page 1 does.
"""

from __future__ import annotations

import sqlite3

import msgspec

from argus.scheduler.order import ORDERS
from projections.cursor import Cursor
from projections.queue import (
    QueueEntry, QueuePage, waiting_ahead, waiting_count, waiting_entry, waiting_page,
)

__all__ = ["QueueCursor", "queue_page", "queue_position", "read_queue"]


class QueueCursor(Cursor, frozen=True):
    """Where a page of the queue ended: the policy it was ordered by, the last entry's
    order values and its position."""

    policy: str
    values: tuple[int, ...]
    position: int

    @classmethod
    def decode(cls, text: str) -> "QueueCursor":
        """ValueError for text that is not a queue cursor this code made."""
        cursor = super().decode(text)
        if cursor.policy not in ORDERS or len(cursor.values) != len(ORDERS[cursor.policy]):
            raise cls.refused()
        return cursor


def _order(policy: str) -> list[tuple[str, bool]]:
    return [(key.field, key.descending) for key in ORDERS[policy]]


def _values(entry: QueueEntry, policy: str) -> tuple[int, ...]:
    return tuple(getattr(entry, key.field) for key in ORDERS[policy])


def queue_page(db: sqlite3.Connection, policy: str, *, limit: int, after: QueueCursor | None = None) -> QueuePage:
    """Up to ``limit`` waiting tasks in ``policy``'s order, after ``after`` (a cursor
    made under another policy starts from the head again: the order changed)."""
    if after is not None and after.policy != policy:
        after = None
    start = 0 if after is None else after.position
    # One more than the page: whether another page follows, without counting.
    entries = waiting_page(db, _order(policy), limit=limit + 1, after=None if after is None else after.values)
    page = [msgspec.structs.replace(e, position=start + i) for i, e in enumerate(entries[:limit], start=1)]
    more = len(entries) > limit
    cursor = QueueCursor(policy, _values(page[-1], policy), page[-1].position).encode() if more and page else None
    return QueuePage(items=page, total=waiting_count(db), limit=limit, next_cursor=cursor)


def read_queue(db: sqlite3.Connection, policy: str) -> list[QueueEntry]:
    """The whole queue in ``policy``'s order, numbered (for replay and small queues)."""
    return queue_page(db, policy, limit=max(1, waiting_count(db))).items


def queue_position(db: sqlite3.Connection, policy: str, task_id: str) -> int | None:
    """The task's place in line (1-based), or None when it is not waiting."""
    entry = waiting_entry(db, task_id)
    if entry is None:
        return None
    return waiting_ahead(db, _order(policy), _values(entry, policy)) + 1
