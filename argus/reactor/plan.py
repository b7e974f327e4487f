"""The reactor's decisions as pure functions of its state, what Ray said, and the time:
the admission plan of a turn, the wait reasons worth recording, and what an attempt's
observed state means. ``Reactor`` wraps them in I/O (Ray calls, appends); ``argus sim``
calls the very same functions on its own state, its fake Ray and its virtual clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import msgspec

from argus.config import SchedulerConfig
from argus.events import AttemptRunning, EventBase, FailureKind, NodeCapacity, TaskDeferred
from argus.lifecycle import AttemptStatus
from argus.rayjobs.gateway import JobObservation
from argus.rayjobs.reports import ExitReport
from argus.reactor.attempts import outcome_events
from argus.reactor.holds import describe_holds, withhold
from argus.reactor.state import ReactorState
from argus.scheduler import Reason
from argus.scheduler.core import AdmissionPlan, Observed, plan_admissions
from projections import TaskView

__all__ = ["Classify", "attempt_step", "plan_turn", "wait_news"]


def plan_turn(state: ReactorState, capacity: Sequence[NodeCapacity] | None, now: float, sched: SchedulerConfig,
              driver_cpus: float, waits: bool = True,
              clearing: Mapping[str, str] | None = None) -> AdmissionPlan[TaskView] | None:
    """The turn's admission plan from what the log says (``state``) and Ray's count just
    taken (``capacity``; None: unreachable); None when nothing waits. ``waits`` False:
    why each task waits is not worked out (the simulator, which does not record it).
    ``clearing``: nodes that admit nothing until an ended attempt's processes are gone
    (``argus.reactor.clearing``), and why."""
    clearing = clearing or {}
    waiting = state.waiting()
    if not waiting:
        return None
    active = state.active()
    fair = sched.policy == "fairshare"
    plan = plan_admissions(
        waiting=waiting, active=active, now=now,
        capacity=withhold(capacity, {*(node for node, _ in state.holds), *clearing}),
        config=sched, driver_cpus=driver_cpus,
        runtimes=state.runtimes, usage=state.usage.with_running(now, active) if fair else None,
        observed=Observed(seen_since=state.seen_since, releasing=list(state.releasing.values()),
                          made=state.queue_memo),
        waits=waits, gpu_caps=state.gpu_caps,
    )
    # A clearing node is not named in wait messages: it clears within seconds (or is
    # quarantined, and named then), and a message that changed with every attempt's end
    # would be a new wait event for every waiting task each time.
    return describe_holds(plan, state.holds, capacity) if waits and capacity is not None else plan


def wait_news(plan: AdmissionPlan[TaskView], now: float, limit: int | None = None) -> list[tuple[TaskView, TaskDeferred]]:
    """The deferrals worth recording: only a changed reason or message is news. ``limit``:
    the first that many (the rest are news again next turn; an event is made only for
    those recorded: after 20,000 arrivals all are news, and a turn records 10,000)."""
    news = ((task, d) for task, d in plan.deferrals if (task.wait_reason, task.wait_message) != (d.reason, d.message))
    # The free GPUs of every node, only where they are the reason: on every deferral they
    # were a list per node per waiting task (10,000 arrivals on 1,000 nodes: 40 MB of log
    # in one turn), where the message's totals already say why.
    return [
        (task, TaskDeferred(task_id=task.task_id, reason=d.reason, message=d.message, needed=task.demand,
                            free_gpus_per_node=list(d.free_gpus_per_node) if Reason.is_per_node(d.reason) else [],
                            reserved_from=d.reserved_from,
                            reserved_nodes=list(d.reserved_nodes), reserved_latest=d.reserved_latest,
                            decided_at=now))
        for task, d in itertools.islice(news, limit)
    ]


class Classify(msgspec.Struct, frozen=True):
    """The attempt failed on its own: its kind is read from Ray's message and the driver's
    log (``argus.reactor.classify``), which the caller fetches."""


def attempt_step(task: TaskView, observed: JobObservation | None, now: float, sched: SchedulerConfig,
                 exit_report: ExitReport | None = None) -> list[EventBase] | Classify:
    """What the observed state of the task's latest (SUBMITTED or RUNNING) attempt means:
    its end (lost, succeeded or incomplete, or stopped by us, and why), that it runs, or
    nothing new. ``exit_report``: its driver's, where there is one (how far it got)."""
    attempt = task.attempts[-1]
    if observed is None:
        if attempt.interrupted_at is not None:  # the operator stopped it, with Ray: not lost
            return outcome_events(task, ray_status=AttemptStatus.LOST, exit_code=None, kind=FailureKind.INTERRUPTED,
                                  evidence=attempt.stop_reason, now=now, config=sched)
        return outcome_events(task, ray_status=AttemptStatus.LOST, exit_code=None, kind=FailureKind.CLUSTER_LOST,
                              evidence=f"Ray has no job {attempt.submission_id} (head restarted or job lost)",
                              now=now, config=sched)
    if observed.is_terminal:
        if observed.status == AttemptStatus.SUCCEEDED:
            return outcome_events(task, ray_status=observed.status, exit_code=observed.driver_exit_code, kind=None,
                                  evidence="", now=now, config=sched,
                                  step=exit_report.step if exit_report else None, exit_report=exit_report)
        if not attempt.stop_reason:
            return Classify()
        kind = (FailureKind.INTERRUPTED if attempt.interrupted_at is not None
                else FailureKind.TIME_LIMIT if attempt.time_limit_reached_at is not None
                else FailureKind.PREEMPTED if attempt.preempted_by
                else FailureKind.STALLED if attempt.stalled_at is not None else FailureKind.INSUFFICIENT_RESOURCES)
        return outcome_events(task, ray_status=observed.status, exit_code=observed.driver_exit_code, kind=kind,
                              evidence=f"{attempt.stop_reason} (Ray: {observed.status})", now=now, config=sched)
    if observed.status == AttemptStatus.RUNNING and attempt.ray_status == AttemptStatus.SUBMITTED:
        return [AttemptRunning(task_id=task.task_id, attempt_no=attempt.attempt_no,
                               submission_id=attempt.submission_id, started_at=observed.start_time if observed.start_time is not None else now,
                               seen_at=now, driver_node_id=observed.driver_node_id or "")]
    return []
