"""What the reactor knows: every unfinished task, folded from the log with ``evolve_task``.

The reactor keeps nothing that the log cannot rebuild. On start it reads the ``tasks``
projection (itself the fold of the log) together with that projection's checkpoint in one
read transaction, then folds every later event from its subscription.
"""

from __future__ import annotations

import sqlite3
import time


from argus.events import CapacityObserved, ClusterUnreachable, NodeCapacity, Recorded
from argus.lifecycle import TaskState
from argus.store.dbfile import read_transaction
from projections import TaskView, evolve_task, projection_checkpoint
from projections.cluster import read_cluster
from projections.runtime_stats import RuntimeHistory, read_runtime_history, run_key, run_seconds
from projections.tasks import TASK_EVENT_TYPES
from projections.tasks_read import unfinished_tasks
from projections.usage import UsageLedger, ended_usage, read_usage

__all__ = ["ReactorState"]

class ReactorState:
    """Unfinished tasks by id, plus the last capacity the reactor recorded."""

    def __init__(self, half_life_s: float) -> None:
        self.tasks: dict[str, TaskView] = {}
        self.position = 0
        self.last_capacity: tuple[NodeCapacity, ...] | None = None
        self.cluster_reachable: bool | None = None
        self.runtimes = RuntimeHistory()  # succeeded runs: the estimates of the others
        self.usage = UsageLedger(half_life_s)  # ended attempts' GPU-seconds, decayed (fairshare)

    @classmethod
    def load(cls, db: sqlite3.Connection, half_life_s: float) -> "ReactorState":
        """Snapshot the unfinished tasks and the last cluster observation, consistently."""
        state = cls(half_life_s)
        with read_transaction(db):
            state.usage = read_usage(db, half_life_s, now=time.time())
            state.position = projection_checkpoint(db, "tasks")
            state.tasks = {task.task_id: task for task in unfinished_tasks(db)}
            state.runtimes = read_runtime_history(db)
            cluster = read_cluster(db)
            if cluster is not None:
                state.cluster_reachable = cluster.reachable
                state.last_capacity = cluster.nodes
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
            if rec.type == "AttemptEnded":  # as the gpu_usage projection adds it
                for user, hour, gpu_s in ended_usage(before, view):
                    self.usage.add(user, hour, gpu_s)
            if view.state.is_terminal():
                self.tasks.pop(task_id, None)
                seconds = run_seconds(view) if view.state is TaskState.SUCCEEDED else None
                if seconds is not None:
                    self.runtimes.add(run_key(view), seconds)
            else:
                self.tasks[task_id] = view
        elif isinstance(rec.event, CapacityObserved):
            self.last_capacity = tuple(rec.event.nodes)
            self.cluster_reachable = True
        elif isinstance(rec.event, ClusterUnreachable):
            self.cluster_reachable = False

    def waiting(self) -> list[TaskView]:
        """Tasks not yet handed to Ray, in FIFO order (submission position)."""
        return sorted((t for t in self.tasks.values() if t.state.is_waiting()), key=lambda t: t.seq)

    def active(self) -> list[TaskView]:
        """Tasks that may hold a Ray job (including ones being canceled)."""
        return [
            t for t in self.tasks.values()
            if t.state.holds_ray_job() or t.state is TaskState.CANCELING
        ]
