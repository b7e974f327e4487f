"""A task as the log says it is: ``TaskView`` with its ``AttemptView``s, and the pure fold
of a task's events into it (``evolve_task``, a handler per event type).

``evolve_task`` is the one fold of a task's events. The API's read model, the reactor's
memory and the replay tool all use it, so they cannot disagree about what a task is. Its
tables are ``projections.tasks``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import msgspec

from argus.events import (
    AttemptEnded,
    AttemptRunning,
    AttemptTimeLimitReached,
    AttemptPlacementTimedOut,
    AttemptInterrupted,
    AttemptOutputsRemoved,
    AttemptStacksCaptured,
    AttemptStalled,
    AttemptPreempted,
    AttemptOutputTruncated,
    AttemptProgressed,
    CheckpointObserved,
    AttemptStarting,
    AttemptSubmitted,
    Demand,
    FailureKind,
    Recorded,
    RetryScheduled,
    TaskCanceled,
    TaskCancelRequested,
    TaskDeferred,
    TaskFailed,
    TaskSubmitted,
    TaskIncomplete,
    TaskSucceeded,
)
from argus.lifecycle import NEXT_STATE, AttemptStatus, TaskState, next_state
from argus.scheduler.model import Reason

__all__ = ["AttemptView", "PREEMPTING", "TASK_EVENT_TYPES", "TaskView", "evolve_task"]

TASK_EVENT_TYPES = frozenset(
    {
        "TaskSubmitted",
        "TaskDeferred",
        "AttemptStarting",
        "AttemptSubmitted",
        "AttemptRunning",
        "AttemptTimeLimitReached",
        "AttemptPlacementTimedOut",
        "AttemptStalled",
        "AttemptStacksCaptured",
        "AttemptInterrupted",
        "AttemptPreempted",
        "CheckpointObserved",
        "AttemptProgressed",
        "AttemptOutputTruncated",
        "AttemptEnded",
        "RetryScheduled",
        "TaskSucceeded",
        "TaskIncomplete",
        "TaskFailed",
        "TaskCancelRequested",
        "TaskCanceled",
        "AttemptOutputsRemoved",
    }
)


class AttemptView(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    attempt_no: int
    submission_id: str
    # An AttemptStatus value: STARTING (intent recorded) | SUBMITTED | RUNNING | SUCCEEDED |
    # FAILED | STOPPED | LOST | NOT_SUBMITTED. Typed str: a stored view decodes whatever
    # an AttemptEnded once said, and a StrEnum compares equal to its string.
    ray_status: str
    failure_kind: FailureKind | None = None
    evidence: str = ""
    exit_code: int | None = None
    decided_at: float
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    recovered: bool = False
    time_limit_reached_at: float | None = None  # its Ray job is being stopped at the time limit
    running_seen_at: float | None = None  # when the reactor first saw it RUNNING
    placement_timed_out_at: float | None = None  # its Ray job is being stopped: placement groups PENDING too long
    stalled_at: float | None = None  # its Ray job is being stopped: no new step for its bound (AttemptStalled)
    interrupted_at: float | None = None  # the operator stopped Argus with it running (AttemptInterrupted)
    stacks_at: float | None = None  # its stacks were taken (or given up on) before its stop (AttemptStacksCaptured)
    stacks_processes: int = 0  # how many processes were dumped
    stop_reason: str = ""  # why the reactor is stopping it (the evidence its end will carry)
    preempted_by: str = ""  # the task it is stopped to make room for (AttemptPreempted)
    node_ids: tuple[str, ...] = ()  # where the scheduler placed its gang (AttemptStarting)
    node_ips: tuple[str, ...] = ()
    driver_node_id: str = ""  # where Ray ran its driver (AttemptRunning)
    driver_node_ip: str = ""
    checkpoint_step: int | None = None  # its last checkpoint a resume can use (CheckpointObserved)
    checkpointed_at: float | None = None
    ended_at_step: int | None = None  # the training step it ended at, where known (AttemptEnded.step)
    # Its training's progress as its driver reported it (AttemptProgressed).
    step: int | None = None
    step_at: float | None = None
    first_step: int | None = None
    total_steps: int | None = None
    step_time_s: float | None = None
    # When this attempt's first reported step came (the step_at of its first progress
    # report with a step): the start of its productive time (projections.goodput), which
    # ``step_at`` alone, overwritten by every report, cannot tell.
    first_step_at: float | None = None
    # Its files under jobs/ deleted after the task finished (AttemptOutputsRemoved): the
    # bytes so far, when last, and whether its whole folder is gone.
    outputs_removed_bytes: int = 0
    outputs_removed_at: float | None = None
    outputs_gone: bool = False
    # Its output passed its budget (AttemptOutputTruncated): bytes printed, and dropped.
    output_bytes: int | None = None
    output_dropped: int = 0
    output_final: bool = False  # the count is the command's whole output

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


class TaskView(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A task as the log says it is now.

    Immutable and without cycles, so untracked by the cycle collector (a rebuild holds one
    per task); defaults are left out of its stored JSON (``tasks.view``)."""

    task_id: str
    user: str
    workload: str
    kind: str
    state: TaskState
    priority: int
    max_attempts: int
    demand: Demand
    seq: int  # log position of TaskSubmitted: the FIFO order
    created_at: float
    updated_at: float
    stream_version: int
    attempts: tuple[AttemptView, ...] = ()
    next_run_at: float | None = None
    failure_kind: FailureKind | None = None
    error_summary: str = ""
    wait_reason: str | None = None
    wait_message: str = ""
    waiting_since: float | None = None
    cancel_requested_by: str | None = None
    warnings: tuple[str, ...] = ()
    name: str = ""  # the spec's optional ``name:``, shown beside the id
    total_steps: int | None = None  # training steps asked for, when the spec says
    time_limit_s: float | None = None  # how long one attempt may run
    stall_timeout_s: float | None = None  # no new step for this long: stalled (the spec's stall_timeout)
    retry_on: tuple[str | int, ...] = ()  # kinds and exit codes its spec asks to retry on (retry_on)
    expected_start: float | None = None  # its reservation (reserve-backfill): the estimated start
    # ... and when it starts at the latest, while the tasks it waits for have time limits
    start_at_latest: float | None = None
    preemptible: bool = False  # may be stopped to make room for other work
    # Since when room has been made for it (its deferrals since say ``preempting``): rooms
    # go out in the order they were made (argus.scheduler.fairshare).
    preempting_since: float | None = None

    @property
    def latest_attempt(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None


_replace = msgspec.structs.replace
# The deferral reason of a task others are being stopped for (the scheduler's own code).
PREEMPTING = Reason.PREEMPTING


def _with_attempt(view: TaskView, attempt_no: int, **changes: object) -> tuple[AttemptView, ...]:
    attempts = view.attempts
    if attempts and attempts[-1].attempt_no == attempt_no:  # the usual case: the newest one
        return (*attempts[:-1], _replace(attempts[-1], **changes))
    return tuple(_replace(a, **changes) if a.attempt_no == attempt_no else a for a in attempts)


def evolve_task(view: TaskView | None, rec: Recorded) -> TaskView:
    """Apply one recorded task event. Raises IllegalTransition for an event the state
    does not allow, so an inline projection refuses to record it."""
    if view is not None:
        state = NEXT_STATE.get((view.state, rec.type)) or next_state(view.state, rec.type)
        return _EVOLVE[rec.type](view, rec.event, state, rec)  # type: ignore[arg-type]
    state = next_state(None, rec.type)  # raises unless TaskSubmitted
    event = rec.event
    assert isinstance(event, TaskSubmitted)  # next_state raised otherwise
    return TaskView(
        task_id=event.task_id,
        user=event.user,
        workload=event.workload,
        kind=event.kind,
        state=state,
        priority=event.priority,
        max_attempts=event.max_attempts,
        demand=event.demand,
        seq=rec.position,
        created_at=event.submitted_at,
        updated_at=rec.recorded_at,
        stream_version=rec.version,
        waiting_since=event.submitted_at,
        warnings=tuple(event.warnings),
        name=str(event.spec.get("name") or ""),
        total_steps=_total_steps(event),
        time_limit_s=event.time_limit_s,
        preemptible=event.preemptible,
        stall_timeout_s=event.stall_timeout_s,
        retry_on=_retry_on(event.spec.get("retry_on")),
    )


def _retry_on(value: object) -> tuple[str | int, ...]:
    """The spec's ``retry_on`` (checked at submit; a stored spec is read as it is)."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(v for v in value if isinstance(v, (str, int)) and not isinstance(v, bool))


_TOTAL_STEPS_RE = re.compile(r"(?:^|\s)\+{0,2}trainer\.total_training_steps=['\"]?(\d+)")


def _total_steps(event: TaskSubmitted) -> int | None:
    """``total_training_steps`` of a basic spec, else as the command sets it for verl."""
    value = event.spec.get("total_training_steps")
    if isinstance(value, int):
        return value
    if "total_training_steps" not in event.command_raw:  # most commands: no regex search
        return None
    found = _TOTAL_STEPS_RE.search(event.command_raw)
    return int(found.group(1)) if found else None


# One function per event type after the first, looked up by type name: a rebuild folds a
# million events, and a chain of isinstance checks was a visible share of that time.
def _deferred(view: TaskView, e: TaskDeferred, state: TaskState, rec: Recorded) -> TaskView:
    since = None
    if e.reason == PREEMPTING:
        since = view.preempting_since if view.wait_reason == PREEMPTING else None
        since = rec.recorded_at if since is None else since
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    wait_reason=e.reason, wait_message=e.message, expected_start=e.reserved_from,
                    start_at_latest=e.reserved_latest, preempting_since=since)


def _starting(view: TaskView, e: AttemptStarting, state: TaskState, rec: Recorded) -> TaskView:
    attempt = AttemptView(
        attempt_no=e.attempt_no, submission_id=e.submission_id, ray_status=AttemptStatus.STARTING,
        decided_at=e.decided_at, node_ids=tuple(e.node_ids), node_ips=tuple(e.node_ips),
    )
    return _replace(
        view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
        attempts=(*view.attempts, attempt), next_run_at=None, wait_reason=None,
        wait_message="", waiting_since=None, expected_start=None, start_at_latest=None, preempting_since=None,
    )


def _submitted(view: TaskView, e: AttemptSubmitted, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, ray_status=AttemptStatus.SUBMITTED,
                             submitted_at=e.submitted_at, recovered=e.recovered)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _running(view: TaskView, e: AttemptRunning, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, ray_status=AttemptStatus.RUNNING, started_at=e.started_at,
                             running_seen_at=e.seen_at, driver_node_id=e.driver_node_id,
                             driver_node_ip=e.driver_node_ip)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _ended(view: TaskView, e: AttemptEnded, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(
        view, e.attempt_no, ray_status=e.ray_status, failure_kind=e.failure_kind,
        evidence=e.evidence, exit_code=e.exit_code, ended_at=e.ended_at, ended_at_step=e.step,
    )
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _retry(view: TaskView, e: RetryScheduled, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(
        view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
        next_run_at=e.next_run_at, failure_kind=e.failure_kind, wait_reason="retry_backoff",
        wait_message=f"attempt {e.failed_attempt_no} failed ({e.failure_kind.value}); "
        f"retry in {e.delay_s:.0f}s",
        waiting_since=rec.recorded_at,
    )


def _succeeded(view: TaskView, e: TaskSucceeded, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    failure_kind=None, error_summary="")


def _incomplete(view: TaskView, e: TaskIncomplete, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    failure_kind=None, error_summary=e.reason)


def _time_limit(view: TaskView, e: AttemptTimeLimitReached, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, time_limit_reached_at=e.reached_at, stop_reason=(
        f"stopped at its time limit of {e.time_limit_s:g} s after running {e.ran_s:.0f} s"))
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _stalled(view: TaskView, e: AttemptStalled, state: TaskState, rec: Recorded) -> TaskView:
    at = f"after step {e.step}" if e.step is not None else "before its first step"
    attempts = _with_attempt(view, e.attempt_no, stalled_at=e.reached_at, stop_reason=(
        f"stalled: no new step for {e.reached_at - e.since:.0f} s {at} (bound {e.bound_s:.0f} s: {e.why}); "
        "stopped, to resume from its last checkpoint"))
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _stacks(view: TaskView, e: AttemptStacksCaptured, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, stacks_at=e.captured_at, stacks_processes=len(e.processes))
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _interrupted(view: TaskView, e: AttemptInterrupted, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, interrupted_at=e.interrupted_at,
                             stop_reason=f"interrupted by {e.by}: {e.reason}; resumed first when Argus is back")
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version, attempts=attempts)


def _placement_timeout(view: TaskView, e: AttemptPlacementTimedOut, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, placement_timed_out_at=e.reached_at, stop_reason=(
        f"placement group(s) {', '.join(e.placement_groups)} stayed PENDING for {e.pending_s:.0f} s "
        f"(v2.scheduler.placement_timeout_s={e.timeout_s:g}): Ray could not place the gang as it was "
        "admitted; stopped, to be retried"))
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _preempted(view: TaskView, e: AttemptPreempted, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, preempted_by=e.by_task_id, stop_reason=e.message)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _checkpoint(view: TaskView, e: CheckpointObserved, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, checkpoint_step=e.step, checkpointed_at=e.saved_at)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _progressed(view: TaskView, e: AttemptProgressed, state: TaskState, rec: Recorded) -> TaskView:
    changes: dict[str, object] = dict(step=e.step, step_at=e.step_at, first_step=e.first_step,
                                      total_steps=e.total_steps, step_time_s=e.step_time_s)
    if e.step is not None and e.step_at is not None:
        attempt = next((a for a in reversed(view.attempts) if a.attempt_no == e.attempt_no), None)
        if attempt is not None and attempt.first_step_at is None:
            changes["first_step_at"] = e.step_at
    attempts = _with_attempt(view, e.attempt_no, **changes)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _output(view: TaskView, e: AttemptOutputTruncated, state: TaskState, rec: Recorded) -> TaskView:
    attempts = _with_attempt(view, e.attempt_no, output_bytes=e.total_bytes, output_dropped=e.dropped_bytes,
                             output_final=e.final)
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    attempts=attempts)


def _failed(view: TaskView, e: TaskFailed, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    failure_kind=e.failure_kind, error_summary=e.error_summary)


def _cancel_requested(view: TaskView, e: TaskCancelRequested, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    cancel_requested_by=e.by)


def _canceled(view: TaskView, e: TaskCanceled, state: TaskState, rec: Recorded) -> TaskView:
    return _replace(view, state=state, updated_at=rec.recorded_at, stream_version=rec.version,
                    failure_kind=FailureKind.CANCELED, next_run_at=None, wait_reason=None,
                    wait_message="", expected_start=None, start_at_latest=None)


def _outputs_removed(view: TaskView, e: AttemptOutputsRemoved, state: TaskState, rec: Recorded) -> TaskView:
    # ``updated_at`` stays: the task did not change, the files it left did (its age counts
    # from its end).
    if e.attempt_no is None:
        return _replace(view, stream_version=rec.version)
    attempt = next((a for a in view.attempts if a.attempt_no == e.attempt_no), None)
    if attempt is None:
        return _replace(view, stream_version=rec.version)
    sid = attempt.submission_id
    attempts = _with_attempt(view, e.attempt_no, outputs_removed_at=e.removed_at,
                             outputs_removed_bytes=attempt.outputs_removed_bytes + e.bytes,
                             outputs_gone=attempt.outputs_gone or (e.complete and sid in e.paths))
    return _replace(view, stream_version=rec.version, attempts=attempts)


_EVOLVE: dict[str, Callable[[TaskView, Any, TaskState, Recorded], TaskView]] = {
    "TaskDeferred": _deferred,
    "AttemptStarting": _starting,
    "AttemptSubmitted": _submitted,
    "AttemptRunning": _running,
    "AttemptTimeLimitReached": _time_limit,
    "AttemptPlacementTimedOut": _placement_timeout,
    "AttemptStalled": _stalled,
    "AttemptStacksCaptured": _stacks,
    "AttemptInterrupted": _interrupted,
    "AttemptPreempted": _preempted,
    "CheckpointObserved": _checkpoint,
    "AttemptProgressed": _progressed,
    "AttemptOutputTruncated": _output,
    "AttemptEnded": _ended,
    "RetryScheduled": _retry,
    "TaskSucceeded": _succeeded,
    "TaskIncomplete": _incomplete,
    "TaskFailed": _failed,
    "TaskCancelRequested": _cancel_requested,
    "TaskCanceled": _canceled,
    "AttemptOutputsRemoved": _outputs_removed,
}
assert set(_EVOLVE) | {"TaskSubmitted"} == TASK_EVENT_TYPES
