"""Estimated start times of the waiting tasks, as ``GET /tasks/{id}`` and ``/queue`` show
them: the scheduler's own policy run forward (``argus.scheduler.eta``) from the log's
projections: the unfinished tasks, the cluster as last observed and the run-time history.

One forward run serves every request for a while: it is redone only when the log has
moved and ``min_interval_s`` has passed. It reads only what it runs forward: the first
``DEFAULT_HORIZON`` waiting tasks in the policy's order and the tasks holding Ray jobs, so
its cost does not grow with the queue.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

from argus.config import ArgusConfig
from argus.lifecycle import TaskState
from argus.reactor.admission import policy_inputs
from argus.scheduler import PolicyConfig
from argus.scheduler.eta import DEFAULT_HORIZON, estimate_starts
from argus.scheduler.queue import fair_view, queue_page
from argus.store import EventStore
from argus.store.dbfile import read_transaction
from projections.cluster import read_cluster
from projections.runtime_stats import read_runtime_history
from projections.tasks import TASK_FOLD
from projections.tasks_read import tasks_in_states

__all__ = ["EtaBoard"]


class EtaBoard:
    """The latest estimated starts, by task id (tasks past the horizon have none)."""

    def __init__(self, store: EventStore, config: ArgusConfig, min_interval_s: float = 5.0) -> None:
        self.store, self.config, self.min_interval_s = store, config, min_interval_s
        self._starts: dict[str, float] = {}
        self._head = -1
        self._at = -float("inf")
        self._lock = asyncio.Lock()

    async def starts(self) -> dict[str, float]:
        async with self._lock:  # one forward run at a time; the others take its result
            if time.monotonic() - self._at >= self.min_interval_s:
                head = await self.store.head_position()
                if head != self._head:
                    self._starts = await self.store.read_snapshot(self._compute)
                    self._head = head
                self._at = time.monotonic()
            return self._starts

    def _compute(self, db: sqlite3.Connection) -> dict[str, float]:
        sched = self.config.v2.scheduler
        with read_transaction(db):
            head = queue_page(db, sched.policy, limit=DEFAULT_HORIZON, fair=fair_view(self.config)).items
            found = TASK_FOLD.load_many(db, [e.task_id for e in head if e.task_id])
            active = tasks_in_states(db, [s for s in TaskState if s.holds_ray_job() or s is TaskState.CANCELING])
            cluster = read_cluster(db)
            history = read_runtime_history(db)
        if cluster is None or not cluster.reachable:
            return {}
        now = time.time()
        waiting = [found[e.task_id] for e in head if e.task_id in found]
        queue, running, capacity = policy_inputs(
            waiting=waiting, active=active, capacity=list(cluster.nodes), now=now, config=sched,
            driver_cpus=self.config.entrypoint_num_cpus, runtimes=history)
        assert capacity is not None
        return estimate_starts(queue, running, capacity, now, PolicyConfig.from_scheduler(sched))
