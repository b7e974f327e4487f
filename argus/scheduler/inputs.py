"""What the policy is given: the log's tasks as ``QueuedTask``/``RunningTask``.

Ray's free capacity lags behind our own decisions: a job just handed to Ray has not yet
reserved its GPUs (verl creates its placement groups some seconds after the driver
starts). So every attempt that is *in flight* — submitted but not yet settled — goes to
the policy as an unclaimed running task, whose demand the policy takes off the snapshot
(``RunningTask.claimed``). An attempt counts as settled ``SETTLE_S`` after Ray reported
it RUNNING; from then on Ray's snapshot includes it.

The reactor (``argus.reactor.admission``), the API's ETAs and the queue shown under
``fairshare`` all build the policy's view here, so they cannot disagree.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

import msgspec

from argus.config import SchedulerConfig
from argus.events import Demand, NodeCapacity
from argus.lifecycle import AttemptStatus, TaskState
from argus.scheduler.model import Capacity, QueuedTask, RunningTask
from projections import TaskView
from projections.runtime_stats import RuntimeHistory, read_runtime_history
from projections.tasks_read import tasks_in_states
from projections.usage import live_usage, read_usage

__all__ = ["SETTLE_S", "FairInputs", "policy_inputs", "read_fair_inputs", "settles_at", "with_driver"]

SETTLE_S = 15.0


def settles_at(task: TaskView) -> float | None:
    """When the task's live attempt is in Ray's counts for sure; None: no live attempt.
    From when it was seen running: Ray's start_time is when it accepted the job, and a job
    can take 10 s to run, then more to create its placement groups (bench_local_stack saw a
    5th job admitted on 4 GPUs when this counted from start_time)."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ended:
        return None
    if attempt.started_at is None:
        return float("inf")  # STARTING or SUBMITTED: not holding anything in Ray's view yet
    return (attempt.running_seen_at or attempt.started_at) + SETTLE_S


def _in_flight(task: TaskView, now: float) -> bool:
    settles = settles_at(task)
    return settles is not None and now < settles


def _unclaimed_demand(task: TaskView, driver_cpus: float) -> Demand:
    """What an in-flight task still has to take from Ray's free counts: all of it while
    Ray has not started it; once it runs, its driver's CPU is in Ray's counts already
    (counting it twice left a GPU idle on argus up, whose CPUs per GPU are exact)."""
    attempt = task.latest_attempt
    running = attempt is not None and attempt.ray_status == AttemptStatus.RUNNING
    return with_driver(task.demand, 0.0 if running else driver_cpus)


def with_driver(demand: Demand, driver_cpus: float) -> Demand:
    return msgspec.structs.replace(demand, cpus_per_node=demand.cpus_per_node + driver_cpus)


def policy_inputs(
    *,
    waiting: list[TaskView],
    active: list[TaskView],
    capacity: list[NodeCapacity] | None,
    now: float,
    config: SchedulerConfig,
    driver_cpus: float = 0.0,
    runtimes: RuntimeHistory | None = None,
) -> tuple[list[QueuedTask], list[RunningTask], Capacity | None]:
    """The policy's view of the tasks and the cluster: what ``plan_admissions`` decides on,
    and what ETAs (``argus.scheduler.eta``) run forward from."""
    history = runtimes or RuntimeHistory()
    default = config.default_runtime_s
    snapshot = Capacity(nodes=tuple(capacity)) if capacity is not None else None
    queue = [
        QueuedTask(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), seq=t.seq,
                   priority=t.priority, user=t.user, next_run_at=t.next_run_at,
                   estimate_s=history.estimate(t, default)[0], limited=t.time_limit_s is not None,
                   preempting_since=t.preempting_since)
        for t in waiting
    ]
    running = [
        RunningTask(task_id=t.task_id, demand=_unclaimed_demand(t, driver_cpus) if in_flight
                    else with_driver(t.demand, driver_cpus), user=t.user, claimed=not in_flight,
                    expected_end=_began(t, now) + history.estimate(t, default)[0], priority=t.priority,
                    preemptible=t.preemptible, stopping=_stopping(t), started_at=_began(t, now))
        for t in active
        for in_flight in (_in_flight(t, now),)
    ]
    return queue, running, snapshot


def _stopping(task: TaskView) -> bool:
    """Its Ray job is being stopped (preempted, time limit, watchdog, cancel)."""
    attempt = task.latest_attempt
    return task.state is TaskState.CANCELING or (attempt is not None and bool(attempt.stop_reason))


def _began(task: TaskView, now: float) -> float:
    """When the task's current attempt began, as far as the log knows."""
    attempt = task.latest_attempt
    if attempt is None:
        return now
    return attempt.started_at or attempt.submitted_at or attempt.decided_at


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
    """For the queue shown under ``fairshare`` and each user's standing (the reactor keeps
    the same inputs in memory)."""
    waiting = tasks_in_states(db, [s for s in TaskState if s.is_waiting()])
    active = tasks_in_states(db, [s for s in TaskState if s.holds_ray_job() or s is TaskState.CANCELING])
    queue, running, _ = policy_inputs(waiting=waiting, active=active, capacity=None, now=now, config=config,
                                      driver_cpus=driver_cpus, runtimes=read_runtime_history(db))
    usage = read_usage(db, config.fairshare.half_life_s, now=now).at(now, live_usage(active, now))
    return FairInputs(waiting=waiting, active=active, queue=queue, running=running, usage=usage)
