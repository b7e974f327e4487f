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
    TaskIncomplete,
    TaskSucceeded,
)
from argus.rayjobs.reports import ExitReport
from argus.lifecycle import AttemptStatus, TaskState
from projections import AttemptView, TaskView

__all__ = ["outcome_events", "retry_delay", "short_of_the_end"]


_NOT_COUNTED = (FailureKind.INSUFFICIENT_RESOURCES, FailureKind.PREEMPTED, FailureKind.INTERRUPTED)


def retry_delay(task: TaskView, kind: FailureKind, config: SchedulerConfig) -> float:
    """Resource races back off exponentially over consecutive resource failures (capped);
    a lost cluster is retried after the plain interval; a preempted attempt at once (its
    task waits at its old place in line, behind the work it made room for)."""
    if kind in (FailureKind.PREEMPTED, FailureKind.INTERRUPTED):
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


def _may_retry(task: TaskView, kind: FailureKind, now: float, config: SchedulerConfig,
               step: int | None = None) -> bool:
    """INSUFFICIENT_RESOURCES is a race with other work, not the task's fault: retried
    without counting, until the task has waited ``max_pending_s`` since it was submitted
    (0: for ever). CLUSTER_LOST counts against ``max_attempts`` (attempts lost to resource
    races or preempted do not). A preempted attempt is always retried: the scheduler
    stopped it, not the task. A transient fault is retried ``transient_retries`` times,
    unless an earlier attempt ended with the same kind at the same step (``_repeated``).
    Nothing else is retried."""
    if kind in (FailureKind.PREEMPTED, FailureKind.INTERRUPTED):
        return True  # the scheduler, or the operator, stopped it: not the task
    if kind.is_transient():
        earlier = task.attempts[:-1]
        transient = sum(1 for a in earlier if a.failure_kind is not None and a.failure_kind.is_transient())
        return _repeated(task, kind, step) is None and transient < config.transient_retries
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
    step: int | None = None,
    exit_report: ExitReport | None = None,
) -> list[EventBase]:
    """``AttemptEnded`` for the task's latest attempt, then what follows for the task:
    success (or, short of its last step, incomplete), cancel, a scheduled retry, or a
    terminal failure. ``step``: the training step it ended at, where its log or its
    checkpoints tell (None: unknown); ``exit_report``: its driver's, where there is one."""
    attempt = task.attempts[-1]
    if step is None:  # its driver's last progress report, else its last checkpoint
        step = attempt.step if attempt.step is not None else attempt.checkpoint_step
    ended = AttemptEnded(
        task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
        ray_status=ray_status, exit_code=exit_code, failure_kind=kind, evidence=evidence,
        ended_at=now, step=step,
    )
    if task.state is TaskState.CANCELING and ray_status != AttemptStatus.SUCCEEDED:
        return [ended, TaskCanceled(task_id=task.task_id, by=task.cancel_requested_by or "?",
                                    ray_status=ray_status, canceled_at=now)]
    if ray_status == AttemptStatus.SUCCEEDED:
        short = short_of_the_end(task, exit_report)
        if short is not None:
            step_reached, total, reason = short
            return [ended, TaskIncomplete(task_id=task.task_id, attempt_no=attempt.attempt_no, step=step_reached,
                                          total_steps=total, reason=reason, finished_at=now)]
        return [ended, TaskSucceeded(task_id=task.task_id, attempt_no=attempt.attempt_no, finished_at=now)]
    kind = kind or FailureKind.UNKNOWN
    if (kind.is_retryable() and _may_retry(task, kind, now, config, step)) or _asked_to_retry(task, kind, exit_code,
                                                                                              config):
        delay = retry_delay(task, kind, config)
        return [ended, RetryScheduled(task_id=task.task_id, failed_attempt_no=attempt.attempt_no,
                                      failure_kind=kind, next_run_at=now + delay, delay_s=delay)]
    return [ended, TaskFailed(task_id=task.task_id, attempt_no=attempt.attempt_no, failure_kind=kind,
                              error_summary=_why_final(task, kind, evidence, now, config, step)[:500],
                              finished_at=now)]


def short_of_the_end(task: TaskView, report: ExitReport | None) -> tuple[int | None, int | None, str] | None:
    """Why a command that exited 0 did not finish its training — ``(step reached, total,
    why)`` — or None: it did, or Argus cannot know. Known from its driver's report: the
    total the trainer announced (else the spec's ``total_training_steps``) against the
    last step it printed (else the last checkpoint saved); without a total, only a resume
    (an earlier attempt saved a checkpoint) that printed no step is known to be short."""
    if report is None:
        return None
    total = report.total_steps or task.total_steps
    saved_before = max((a.checkpoint_step for a in task.attempts[:-1] if a.checkpoint_step is not None), default=None)
    saved = max((s for s in (saved_before, task.attempts[-1].checkpoint_step) if s is not None), default=None)
    reached = report.step if report.step is not None else saved
    if total is not None:
        if reached is not None and reached >= total:
            return None
        where = f"at step {reached} of {total}" if reached is not None else f"before its first step of {total}"
        return reached, total, f"the command exited 0 {where}: the training did not reach its last step"
    if report.step is None and saved_before is not None:
        return saved_before, None, (f"a resumed attempt exited 0 without training a step (it resumed from the "
                                    f"checkpoint of step {saved_before})")
    return None


def _named(retry_on: tuple[str | int, ...], kind: FailureKind | None, exit_code: int | None) -> bool:
    """The spec's ``retry_on`` names this end: its kind, or its exit code."""
    return (kind is not None and kind.value in retry_on) or (exit_code is not None and exit_code in retry_on
                                                             and not isinstance(exit_code, bool))


def _asked_to_retry(task: TaskView, kind: FailureKind, exit_code: int | None, config: SchedulerConfig) -> bool:
    """The user's own rule (``retry_on``), for an end Argus's rule does not retry: at most
    ``retry_on_max`` times per task and within ``max_attempts``."""
    if kind.is_retryable() or not _named(task.retry_on, kind, exit_code) or len(task.attempts) >= task.max_attempts:
        return False
    earlier = sum(1 for a in task.attempts[:-1] if not (a.failure_kind and a.failure_kind.is_retryable())
                  and _named(task.retry_on, a.failure_kind, a.exit_code))
    return earlier < config.retry_on_max


def _repeated(task: TaskView, kind: FailureKind, step: int | None) -> AttemptView | None:
    """An earlier attempt that ended with ``kind`` at ``step`` too (None: none, or the step
    is not known): a fault that strikes twice at one step is the run's, not chance's."""
    if step is None:
        return None
    return next((a for a in reversed(task.attempts[:-1]) if a.failure_kind is kind and a.ended_at_step == step), None)


def _why_final(task: TaskView, kind: FailureKind, evidence: str, now: float,
               config: SchedulerConfig, step: int | None = None) -> str:
    """The evidence, prefixed with the limit that ended the retries, if one did."""
    if kind is FailureKind.INSUFFICIENT_RESOURCES:
        # Said in the user's words; the setting's name is for the admin (docs/taskspec.md).
        return (f"gave up after waiting {now - task.created_at:.0f} s for resources (this cluster "
                f"lets a task wait at most {config.max_pending_s:g} s for them): {evidence}")
    if kind is FailureKind.CLUSTER_LOST:
        return f"cluster lost on {task.max_attempts} attempt(s) (max_attempts): {evidence}"
    if kind.is_transient():
        before = _repeated(task, kind, step)
        if before is not None:  # both attempts' evidence: the summary is all many users read
            return (f"{kind.value} twice at step {step} (attempts {before.attempt_no} and "
                    f"{task.attempts[-1].attempt_no}): not retried again. Attempt {before.attempt_no}: "
                    f"{before.evidence[:200]} | attempt {task.attempts[-1].attempt_no}: {evidence[:200]}")
        return (f"{kind.value}: transient faults were retried {config.transient_retries} time(s) already "
                f"(v2.scheduler.transient_retries): {evidence}")
    return evidence
