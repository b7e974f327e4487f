"""What the fair-share order is computed from, read from the projections: the waiting and
active tasks as the policy sees them (``argus.scheduler.inputs.policy_inputs``) and each
user's decayed usage. The queue shown under ``fairshare`` and each user's standing read
it here; the reactor keeps the same inputs in memory."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from argus.config import SchedulerConfig
from argus.lifecycle import TaskState
from argus.scheduler.inputs import policy_inputs
from argus.scheduler.model import QueuedTask, RunningTask
from projections import TaskView
from projections.runtime_stats import read_runtime_history
from projections.tasks_read import tasks_in_states
from projections.usage import live_usage, read_usage

__all__ = ["FairInputs", "read_fair_inputs"]


class FairInputs(NamedTuple):
    """What the fair-share order is computed from, read from the projections at ``now``:
    the waiting and active tasks, as the policy sees them, and each user's decayed usage."""

    waiting: list[TaskView]
    active: list[TaskView]
    queue: list[QueuedTask]
    running: list[RunningTask]
    usage: dict[str, float]


def read_fair_inputs(db: sqlite3.Connection, config: SchedulerConfig, now: float,
                     driver_cpus: float = 0.0) -> FairInputs:
    """For the queue shown under ``fairshare`` and each user's standing, at ``now``."""
    waiting = tasks_in_states(db, [s for s in TaskState if s.is_waiting()])
    active = tasks_in_states(db, [s for s in TaskState if s.holds_ray_job() or s is TaskState.CANCELING])
    queue, running, _ = policy_inputs(waiting=waiting, active=active, capacity=None, now=now, config=config,
                                      driver_cpus=driver_cpus, runtimes=read_runtime_history(db))
    usage = read_usage(db, config.fairshare.half_life_s, now=now).at(now, live_usage(active, now))
    return FairInputs(waiting=waiting, active=active, queue=queue, running=running, usage=usage)
