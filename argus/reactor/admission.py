"""From the reactor's state to the pure scheduling policy and back: the policy's view of
the tasks (``argus.scheduler.inputs``), its decisions sorted into what the reactor does.
"""

from __future__ import annotations

import msgspec

from argus.config import SchedulerConfig
from argus.events import NodeCapacity
from argus.scheduler import Admit, Defer, PolicyConfig, Preempt, decide
from argus.scheduler.inputs import SETTLE_S, policy_inputs, settles_at, with_driver
from projections import TaskView
from projections.runtime_stats import RuntimeHistory

__all__ = ["AdmissionPlan", "SETTLE_S", "plan_admissions", "plan_expires_at", "policy_inputs", "with_driver"]


class AdmissionPlan(msgspec.Struct, frozen=True):
    admitted: list[TaskView]
    deferrals: list[tuple[TaskView, Defer]]
    notes: dict[str, str] = {}  # task id -> why an admitted task may pass a reservation
    preemptions: list[tuple[TaskView, Preempt]] = []  # running tasks to stop, and for whom
    expires_at: float = float("inf")  # plan_expires_at: until then the same inputs give this plan


def plan_expires_at(waiting: list[TaskView], active: list[TaskView], now: float) -> float:
    """The first instant after ``now`` at which the clock alone could change a plan made
    now: a retry's backoff ends, or an in-flight attempt settles (``_in_flight``). Until
    then, the same tasks, attempts and capacity give the same plan."""
    instants = [t.next_run_at for t in waiting if t.next_run_at is not None and t.next_run_at > now]
    instants += [s for t in active if (s := settles_at(t)) is not None and s > now]
    return min(instants, default=float("inf"))


def plan_admissions(
    *,
    waiting: list[TaskView],
    active: list[TaskView],
    capacity: list[NodeCapacity] | None,
    now: float,
    config: SchedulerConfig,
    driver_cpus: float = 0.0,
    runtimes: RuntimeHistory | None = None,
    usage: dict[str, float] | None = None,
) -> AdmissionPlan:
    """Run the configured policy over the waiting tasks (in its ``queue_order``) and sort its decisions
    into admissions and deferrals. ``driver_cpus`` (the job driver's ``entrypoint_num_cpus``)
    is added to every task's per-node CPUs: the driver lands on one of the task's nodes,
    and which one is Ray's choice. ``runtimes``: the history behind each task's expected
    run time (its time limit first; ``config.default_runtime_s`` last)."""
    by_id = {t.task_id: t for t in waiting}
    queue, running, snapshot = policy_inputs(waiting=waiting, active=active, capacity=capacity, now=now,
                                             config=config, driver_cpus=driver_cpus, runtimes=runtimes)
    decisions = decide(queue, running, snapshot, now, PolicyConfig.from_scheduler(config, usage=usage or {}))
    admitted: list[TaskView] = []
    deferrals: list[tuple[TaskView, Defer]] = []
    notes: dict[str, str] = {}
    preemptions: list[tuple[TaskView, Preempt]] = []
    victims = {t.task_id: t for t in active}
    for decision in decisions:
        if isinstance(decision, Preempt):
            preemptions.append((victims[decision.task_id], decision))
            continue
        task = by_id[decision.task_id]
        if isinstance(decision, Admit):
            admitted.append(task)
            if decision.note:
                notes[task.task_id] = decision.note
        elif isinstance(decision, Defer) and decision.reason != "retry_backoff":
            # A retry's wait is already recorded by RetryScheduled.
            deferrals.append((task, decision))
    # Reservations also move when a running task passes its expected end.
    ends = [r.expected_end for r in running if r.expected_end is not None and r.expected_end > now]
    expires = min([plan_expires_at(waiting, active, now), *ends])
    return AdmissionPlan(admitted=admitted, deferrals=deferrals, notes=notes, expires_at=expires,
                         preemptions=preemptions)


