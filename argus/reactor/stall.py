"""The stall watchdog's rule: when a running attempt that reports its steps has made no
new one for too long (docs/runs.md, "A watchdog for stalled runs").

Pure: the task as the log says (its progress comes from its driver's reports, recorded as
``AttemptProgressed``), the time, the settings. Only an attempt known to report steps is
judged (its trainer announced a total, or printed a step): a command that never prints
verl's lines is never called stalled.

The bound, first match wins:
- before its first step: ``before_first_step_s`` from the attempt's start, or the spec's
  ``stall_timeout`` if longer (models load slowly);
- the spec's ``stall_timeout``, at most ``max_s``;
- the admin's ``default_s``, when set;
- ``step_multiple`` times the attempt's median step time, at least ``floor_s`` (``floor_s``
  alone while no step time is known).
"""

from __future__ import annotations

from argus.config import StallConfig
from argus.events import AttemptStalled
from projections import TaskView

__all__ = ["stall_bound", "stalled"]


def stall_bound(task: TaskView, config: StallConfig) -> tuple[float, float, str] | None:
    """``(bound_s, since, why)`` for the task's running attempt: it is stalled once
    ``bound_s`` passed since ``since`` without a new step. None: not judged."""
    attempt = task.latest_attempt
    if not config.enabled or attempt is None or attempt.started_at is None:
        return None
    spec = min(task.stall_timeout_s, config.max_s) if task.stall_timeout_s is not None else None
    if attempt.step is None or attempt.step_at is None:
        if attempt.total_steps is None:
            return None  # not known to report steps
        bound = max(config.before_first_step_s, spec or 0.0)
        return bound, attempt.started_at, "v2.scheduler.stall.before_first_step_s, before the first step"
    if spec is not None:
        return spec, attempt.step_at, "the spec's stall_timeout"
    if config.default_s > 0:
        return config.default_s, attempt.step_at, "v2.scheduler.stall.default_s"
    if attempt.step_time_s is None:
        return config.floor_s, attempt.step_at, "v2.scheduler.stall.floor_s (no step time known yet)"
    derived = config.step_multiple * attempt.step_time_s
    if derived <= config.floor_s:
        return config.floor_s, attempt.step_at, (f"v2.scheduler.stall.floor_s (more than {config.step_multiple:g} x its "
                                                 f"median step of {attempt.step_time_s:.1f} s)")
    return derived, attempt.step_at, f"{config.step_multiple:g} x its median step of {attempt.step_time_s:.1f} s"


def stalled(task: TaskView, now: float, config: StallConfig) -> AttemptStalled | None:
    """The stall of the task's running attempt, once its bound passed (each attempt once)."""
    attempt = task.latest_attempt
    bound = stall_bound(task, config)
    if attempt is None or bound is None or attempt.stalled_at is not None or attempt.stop_reason:
        return None
    bound_s, since, why = bound
    if now - since < bound_s:
        return None
    return AttemptStalled(task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                          step=attempt.step, since=since, bound_s=bound_s, why=why, reached_at=now)
