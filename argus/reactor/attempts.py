"""What the reactor appends when an attempt ends: the outcome and the task's next step.

Pure functions of (task, what Ray said, config): kept apart from the loop so the retry rule
reads in one place.
"""

from __future__ import annotations

from argus.config import SchedulerConfig
from argus.events import (
    AttemptEnded,
    EventBase,
    FailureKind,
    RetryScheduled,
    TaskCanceled,
    TaskFailed,
    TaskSucceeded,
)
from argus.lifecycle import AttemptStatus, TaskState
from projections import TaskView

__all__ = ["outcome_events", "retry_delay"]


_NOT_COUNTED = (FailureKind.INSUFFICIENT_RESOURCES, FailureKind.PREEMPTED)


def retry_delay(task: TaskView, kind: FailureKind, config: SchedulerConfig) -> float:
    """Resource races back off exponentially over consecutive resource failures (capped);
    a lost cluster is retried after the plain interval; a preempted attempt at once (its
    task waits at its old place in line, behind the work it made room for)."""
    if kind is FailureKind.PREEMPTED:
        return 0.0
    if kind is not FailureKind.INSUFFICIENT_RESOURCES:
        return config.retry_interval_s
    streak = 0  # earlier consecutive resource failures; the latest attempt is ending now
    for attempt in reversed(task.attempts[:-1]):
        if attempt.failure_kind is not FailureKind.INSUFFICIENT_RESOURCES:
            break
        streak += 1
    delay = config.retry_interval_s * config.retry_backoff**streak
    return min(delay, config.retry_max_interval_s)


def _may_retry(task: TaskView, kind: FailureKind, now: float, config: SchedulerConfig) -> bool:
    """INSUFFICIENT_RESOURCES is a race with other work, not the task's fault: retried
    without counting, until the task has waited ``max_pending_s`` since it was submitted
    (0: for ever). CLUSTER_LOST counts against ``max_attempts`` (attempts lost to resource
    races or preempted do not). A preempted attempt is always retried: the scheduler
    stopped it, not the task. Nothing else is retried."""
    if kind is FailureKind.PREEMPTED:
        return True
    if kind is FailureKind.INSUFFICIENT_RESOURCES:
        return not config.max_pending_s or now - task.created_at < config.max_pending_s
    if kind is FailureKind.CLUSTER_LOST:
        counted = sum(1 for a in task.attempts if a.failure_kind not in _NOT_COUNTED)
        return counted < task.max_attempts
    return False


def outcome_events(
    task: TaskView,
    *,
    ray_status: AttemptStatus,
    exit_code: int | None,
    kind: FailureKind | None,
    evidence: str,
    now: float,
    config: SchedulerConfig,
) -> list[EventBase]:
    """``AttemptEnded`` for the task's latest attempt, then what follows for the task:
    success, cancel, a scheduled retry, or a terminal failure."""
    attempt = task.attempts[-1]
    ended = AttemptEnded(
        task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
        ray_status=ray_status, exit_code=exit_code, failure_kind=kind, evidence=evidence,
        ended_at=now,
    )
    if task.state is TaskState.CANCELING and ray_status != AttemptStatus.SUCCEEDED:
        return [ended, TaskCanceled(task_id=task.task_id, by=task.cancel_requested_by or "?",
                                    ray_status=ray_status, canceled_at=now)]
    if ray_status == AttemptStatus.SUCCEEDED:
        return [ended, TaskSucceeded(task_id=task.task_id, attempt_no=attempt.attempt_no, finished_at=now)]
    kind = kind or FailureKind.UNKNOWN
    if kind.is_retryable() and _may_retry(task, kind, now, config):
        delay = retry_delay(task, kind, config)
        return [ended, RetryScheduled(task_id=task.task_id, failed_attempt_no=attempt.attempt_no,
                                      failure_kind=kind, next_run_at=now + delay, delay_s=delay)]
    return [ended, TaskFailed(task_id=task.task_id, attempt_no=attempt.attempt_no, failure_kind=kind,
                              error_summary=_why_final(task, kind, evidence, now, config)[:500],
                              finished_at=now)]


def _why_final(task: TaskView, kind: FailureKind, evidence: str, now: float,
               config: SchedulerConfig) -> str:
    """The evidence, prefixed with the limit that ended the retries, if one did."""
    if kind is FailureKind.INSUFFICIENT_RESOURCES:
        return (f"gave up after waiting {now - task.created_at:.0f} s for resources "
                f"(v2.scheduler.max_pending_s={config.max_pending_s:g}): {evidence}")
    if kind is FailureKind.CLUSTER_LOST:
        return f"cluster lost on {task.max_attempts} attempt(s) (max_attempts): {evidence}"
    return evidence
