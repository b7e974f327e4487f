"""The queue as users are shown it: the ``queue`` projection's waiting tasks, in the order
the configured policy will consider them (``queue_order``), numbered from 1.

The API's ``/queue`` and ``queue_position``, the WebUI (through the API) and
``argus replay at`` all read it here, so none of them can disagree with the reactor.
"""

from __future__ import annotations

import sqlite3

import msgspec

from argus.scheduler.order import queue_order
from projections.queue import QueueEntry, waiting_tasks

__all__ = ["position_in", "read_queue"]


def read_queue(db: sqlite3.Connection, policy: str) -> list[QueueEntry]:
    """Waiting tasks in ``policy``'s order, each with its 1-based ``position``."""
    ordered = queue_order(policy, waiting_tasks(db))
    return [msgspec.structs.replace(e, position=i) for i, e in enumerate(ordered, start=1)]


def position_in(queue: list[QueueEntry], task_id: str) -> int | None:
    """The task's place in line, or None when it is not waiting."""
    return next((e.position for e in queue if e.task_id == task_id), None)
