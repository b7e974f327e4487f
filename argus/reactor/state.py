"""What the reactor knows: every unfinished task, folded from the log with ``evolve_task``.

The reactor keeps nothing that the log cannot rebuild. On start it reads the ``tasks``
projection (itself the fold of the log) together with that projection's checkpoint in one
read transaction, then folds every later event from its subscription.
"""

from __future__ import annotations

import sqlite3
import time


from argus.events import AttemptEnded, CapacityObserved, ClusterUnreachable, NodeCapacity, Recorded
from argus.lifecycle import AttemptStatus, TaskState
from argus.scheduler.inputs import QueueMemo, with_driver
from argus.scheduler.ledger import Commitment
from argus.store.dbfile import read_transaction
from projections import TaskView, evolve_task, projection_checkpoint
from projections.cluster import read_cluster
from projections.runtime_stats import RuntimeHistory, read_runtime_history, run_key, run_seconds
from projections.tasks import TASK_EVENT_TYPES
from projections.tasks_read import unfinished_tasks
from projections.usage import UsageLedger, ended_usage, read_usage

__all__ = ["ReactorState"]

class ReactorState:
    """Unfinished tasks by id, the last capacity the reactor recorded, and what the ledger
    needs beyond the tasks: when each node's unbroken run of observations began, and the
    attempts that ended but that Ray has not been observed since (``releasing``)."""

    def __init__(self, half_life_s: float, driver_cpus: float = 0.0) -> None:
        self.driver_cpus = driver_cpus
        self.seen_since: dict[str, float] = {}
        self.releasing: dict[str, Commitment] = {}  # by submission id
        self.queue_memo = QueueMemo()  # the policy's queue entries, made again only on change
        # waiting() and active(), until a task event changes a task (a turn asks several times)
        self._split: tuple[list[TaskView], list[TaskView]] | None = None
        self.tasks: dict[str, TaskView] = {}
        self.position = 0
        self.last_capacity: tuple[NodeCapacity, ...] | None = None
        self.cluster_reachable: bool | None = None
        self.runtimes = RuntimeHistory()  # succeeded runs: the estimates of the others
        self.usage = UsageLedger(half_life_s)  # ended attempts' GPU-seconds, decayed (fairshare)

    @classmethod
    def load(cls, db: sqlite3.Connection, half_life_s: float, driver_cpus: float = 0.0) -> "ReactorState":
        """Snapshot the unfinished tasks and the last cluster observation, consistently.
        (Ended attempts awaiting release are not kept across a restart: the first
        observation of the new leader comes after every end it could have missed.)"""
        state = cls(half_life_s, driver_cpus)
        with read_transaction(db):
            state.usage = read_usage(db, half_life_s, now=time.time())
            state.position = projection_checkpoint(db, "tasks")
            state.tasks = {task.task_id: task for task in unfinished_tasks(db)}
            state.runtimes = read_runtime_history(db)
            cluster = read_cluster(db)
            if cluster is not None:
                state.cluster_reachable = cluster.reachable
                state.last_capacity = cluster.nodes
                if cluster.reachable:  # since at least then (conservative: maybe earlier)
                    state.seen_since = {n.node_id: cluster.observed_at for n in cluster.nodes}
        return state

    def fold(self, rec: Recorded) -> None:
        """Apply one event from the log (events at or before ``position`` are ignored)."""
        if rec.position <= self.position:
            return
        self.position = rec.position
        if rec.type in TASK_EVENT_TYPES:
            task_id: str = rec.event.task_id  # type: ignore[attr-defined]
            if rec.type != "TaskSubmitted" and task_id not in self.tasks:
                return  # a task that ended before our snapshot: nothing to do
            before = self.tasks.get(task_id)
            view = evolve_task(before, rec)
            if isinstance(rec.event, AttemptEnded):  # as the gpu_usage projection adds it
                for user, hour, gpu_s in ended_usage(before, view):
                    self.usage.add(user, hour, gpu_s)
                self._release_later(before, rec.event)
            if view.state.is_terminal():
                self.tasks.pop(task_id, None)
                self._split = None
                seconds = run_seconds(view) if view.state is TaskState.SUCCEEDED else None
                if seconds is not None:
                    self.runtimes.add(run_key(view), seconds)
            else:
                self.tasks[task_id] = view
                self._split = None
        elif isinstance(rec.event, CapacityObserved):
            self._observed(rec.event)
        elif isinstance(rec.event, ClusterUnreachable):
            self.cluster_reachable = False
            self.seen_since = {}  # every node must be seen again, and settle, after an outage

    def _observed(self, event: CapacityObserved) -> None:
        at = event.observed_at
        self.seen_since = {n.node_id: self.seen_since.get(n.node_id, at) for n in event.nodes}
        self.last_capacity = tuple(event.nodes)
        self.cluster_reachable = True
        # Every end folded so far was recorded before this observation was taken (the
        # reactor observes at the start of a turn): Ray's count now shows what came back.
        self.releasing = {}

    def _release_later(self, before: TaskView | None, event: AttemptEnded) -> None:
        """An attempt that reached Ray stays committed until Ray is observed after its end."""
        attempt = before.latest_attempt if before is not None else None
        if attempt is None or attempt.ended or event.ray_status == AttemptStatus.NOT_SUBMITTED:
            return
        assert before is not None
        self.releasing[event.submission_id] = Commitment(
            task_id=before.task_id, demand=with_driver(before.demand, self.driver_cpus),
            node_ids=attempt.node_ids, ended_at=event.ended_at)

    def waiting(self) -> list[TaskView]:
        """Tasks not yet handed to Ray, in FIFO order (submission position)."""
        return list(self._waiting_and_active()[0])

    def active(self) -> list[TaskView]:
        """Tasks that may hold a Ray job (including ones being canceled)."""
        return list(self._waiting_and_active()[1])

    def _waiting_and_active(self) -> tuple[list[TaskView], list[TaskView]]:
        if self._split is None:
            tasks = self.tasks.values()
            self._split = (sorted((t for t in tasks if t.state.is_waiting()), key=lambda t: t.seq),
                           [t for t in tasks if t.state.holds_ray_job() or t.state is TaskState.CANCELING])
        return self._split
