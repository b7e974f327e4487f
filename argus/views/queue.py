"""The queue as users are shown it: waiting tasks in the order the configured policy will
consider them (``argus.scheduler.order``), numbered from 1, a page at a time.

The API's ``/queue`` and ``queue_position``, the WebUI (through the API) and
``argus replay at`` all read it here, so none of them can disagree with the reactor. Each
page is a walk down the order's index from a cursor (keyset), so page 100 of a queue of
10,000 costs what page 1 does.

Under ``fairshare`` which user goes next depends on usage and on what runs, so no index
holds the order: it is computed from the projections with the policy's own
``fair_pass`` (O(waiting) per page), and pages continue from the last position shown.

It lives on the read side (``argus.views``), not in ``argus.scheduler``: it reads the
projections and, where no time is given, the clock; the scheduler reads neither.
"""

from __future__ import annotations

import sqlite3
import time
from typing import NamedTuple

import msgspec

from argus.config import ArgusConfig, SchedulerConfig
from argus.scheduler import PolicyConfig
from argus.scheduler.fairshare import fair_pass
from argus.scheduler.order import ORDERS
from argus.views.fair_inputs import read_fair_inputs
from projections.cluster import read_cluster
from projections.cursor import Cursor
from projections.queue import (
    QueueEntry, QueuePage, waiting_ahead, waiting_count, waiting_entry, waiting_page,
)

__all__ = ["FairView", "QueueCursor", "fair_queue", "fair_view", "queue_page", "queue_position", "read_queue"]


class FairView(NamedTuple):
    """What the fair-share order needs beyond the queue: the configuration and the time."""

    sched: SchedulerConfig
    now: float
    driver_cpus: float = 0.0


FAIRSHARE = "fairshare"


def fair_view(config: ArgusConfig, now: float | None = None) -> FairView:
    """The deployment's fair-share inputs, now (or at ``now``: replay)."""
    # The API shows the queue as of the request: the wall clock is read here, on the read
    # side, so that nothing in ``argus.scheduler`` has to.
    return FairView(config.v2.scheduler, time.time() if now is None else now, config.entrypoint_num_cpus)


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


def fair_queue(db: sqlite3.Connection, fair: FairView | None = None) -> list[QueueEntry]:
    """Every waiting task in the ``fairshare`` policy's order, numbered."""
    # No view given (tests, small tools): the default configuration, as of the wall clock.
    fair = fair or FairView(SchedulerConfig(policy="fairshare"), time.time())
    sched, now = fair.sched, fair.now
    inputs = read_fair_inputs(db, sched, now, fair.driver_cpus)
    # As the policy: with preemption, work within its user's fair share of the cluster first.
    cluster = read_cluster(db) if sched.preemption else None
    total = sum(n.total_gpus for n in cluster.nodes) if cluster is not None else 0.0
    ordered = fair_pass(inputs.queue, inputs.running, now, PolicyConfig.from_scheduler(sched, usage=inputs.usage),
                        total).order
    entries = {e.task_id: e for e in waiting_page(db, _order(FAIRSHARE), limit=len(inputs.waiting) + 1)}
    return [msgspec.structs.replace(entries[t.task_id], position=i)
            for i, t in enumerate((t for t in ordered if t.task_id in entries), start=1)]


def queue_page(db: sqlite3.Connection, policy: str, *, limit: int, after: QueueCursor | None = None,
               fair: FairView | None = None) -> QueuePage:
    """Up to ``limit`` waiting tasks in ``policy``'s order, after ``after`` (a cursor
    made under another policy starts from the head again: the order changed). ``fair``:
    the configuration and time the ``fairshare`` order is computed for."""
    if after is not None and after.policy != policy:
        after = None
    start = 0 if after is None else after.position
    if policy == FAIRSHARE:
        whole = fair_queue(db, fair)
        page = whole[start:start + limit]
        more = start + limit < len(whole)
        cursor = QueueCursor(policy, _values(page[-1], policy), page[-1].position).encode() if more and page else None
        return QueuePage(items=page, total=len(whole), limit=limit, next_cursor=cursor)
    # One more than the page: whether another page follows, without counting.
    entries = waiting_page(db, _order(policy), limit=limit + 1, after=None if after is None else after.values)
    page = [msgspec.structs.replace(e, position=start + i) for i, e in enumerate(entries[:limit], start=1)]
    more = len(entries) > limit
    cursor = QueueCursor(policy, _values(page[-1], policy), page[-1].position).encode() if more and page else None
    return QueuePage(items=page, total=waiting_count(db), limit=limit, next_cursor=cursor)


def read_queue(db: sqlite3.Connection, policy: str, fair: FairView | None = None) -> list[QueueEntry]:
    """The whole queue in ``policy``'s order, numbered (for replay and small queues)."""
    return queue_page(db, policy, limit=max(1, waiting_count(db)), fair=fair).items


def queue_position(db: sqlite3.Connection, policy: str, task_id: str, fair: FairView | None = None) -> int | None:
    """The task's place in line (1-based), or None when it is not waiting."""
    entry = waiting_entry(db, task_id)
    if entry is None:
        return None
    if policy == FAIRSHARE:
        return next((e.position for e in fair_queue(db, fair) if e.task_id == task_id), None)
    return waiting_ahead(db, _order(policy), _values(entry, policy)) + 1
