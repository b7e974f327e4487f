"""``task ID``: one task's whole life — every event with its time, actor and what changed.

"What changed" is the difference between the TaskView before and after each event, both
computed with ``projections.tasks.evolve_task`` (the same fold as the read model).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from argus.events import Recorded, task_stream
from argus.replay.source import ReplayError, open_log
from argus.replay.waits import WaitSegment, event_time, wait_by_reason, wait_segments
from argus.store import read_stream
from projections.tasks import AttemptView, TaskView, evolve_task

__all__ = [
    "SOURCES",
    "TaskNotFound",
    "TaskTimeline",
    "TimelineEntry",
    "build_timeline",
    "diff_views",
    "load_task_events",
    "nodes_phrase",
    "summarize",
    "task_timeline",
]

# Which part of the system a fact comes from (the API takes commands, the scheduler
# decides, Ray reports what its jobs did).
SOURCES: dict[str, str] = {
    "TaskSubmitted": "api",
    "TaskCancelRequested": "api",
    "TaskDeferred": "scheduler",
    "AttemptStarting": "scheduler",
    "RetryScheduled": "scheduler",
    "TaskSucceeded": "scheduler",
    "TaskIncomplete": "scheduler",
    "TaskFailed": "scheduler",
    "AttemptSubmitted": "ray",
    "AttemptRunning": "ray",
    "AttemptTimeLimitReached": "scheduler",
    "AttemptPlacementTimedOut": "scheduler",
    "AttemptStalled": "scheduler",
    "AttemptStacksCaptured": "ray",
    "AttemptInterrupted": "scheduler",
    "AttemptPreempted": "scheduler",
    "CheckpointObserved": "ray",
    "AttemptProgressed": "ray",
    "AttemptOutputTruncated": "ray",
    "AttemptEnded": "ray",
    "TaskCanceled": "ray",
    "AttemptOutputsRemoved": "api",  # the owner's delete (the retention policy's: the reactor)
}

# Fields that change with every event and say nothing on their own.
_NOISE = {"updated_at", "stream_version", "attempts"}


class TaskNotFound(ReplayError):
    """No events for this task id in the log."""


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    version: int
    time: float  # the fact's own time (see waits.event_time)
    recorded_at: float
    actor: str
    source: str  # api | scheduler | ray
    type: str
    summary: str
    changes: list[str]  # "field: before → after"


class TaskTimeline(msgspec.Struct, frozen=True, kw_only=True):
    task: TaskView
    entries: list[TimelineEntry]
    attempts: list[AttemptView]
    waits: list[WaitSegment]
    wait_by_reason: dict[str, float]
    waited_s: float  # closed waits only


def load_task_events(conn: sqlite3.Connection, task_id: str) -> list[Recorded]:
    events = read_stream(conn, task_stream(task_id))
    if not events:
        raise TaskNotFound(f"no task {task_id!r} in the log")
    return events


def task_timeline(db_path: str | Path, task_id: str) -> TaskTimeline:
    """Every event of ``task_id`` with what it changed, its attempts and its waits."""
    with open_log(db_path) as source:
        records = load_task_events(source.conn, task_id)
    return build_timeline(records)


def build_timeline(records: list[Recorded]) -> TaskTimeline:
    view: TaskView | None = None
    entries: list[TimelineEntry] = []
    for rec in records:
        after = evolve_task(view, rec)
        entries.append(TimelineEntry(
            position=rec.position, version=rec.version, time=event_time(rec),
            recorded_at=rec.recorded_at, actor=rec.meta.actor, source=SOURCES.get(rec.type, "?"),
            type=rec.type, summary=summarize(rec), changes=diff_views(view, after),
        ))
        view = after
    assert view is not None
    waits = wait_segments(records)
    per_reason = wait_by_reason(waits)
    return TaskTimeline(task=view, entries=entries, attempts=list(view.attempts), waits=waits,
                        wait_by_reason=per_reason, waited_s=sum(per_reason.values()))


def _show(value: Any, field: str = "") -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (int, float)) and (field.endswith("_at") or field == "waiting_since"):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    if hasattr(value, "value"):  # enums
        return str(value.value)
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def diff_views(before: TaskView | None, after: TaskView) -> list[str]:
    """Human-readable field changes between two TaskViews (attempt fields as ``aN.field``)."""
    if before is None:
        return [f"state: - → {after.state.value}"]
    changes: list[str] = []
    for field in after.__struct_fields__:
        if field in _NOISE:
            continue
        old, new = getattr(before, field), getattr(after, field)
        if old != new:
            changes.append(f"{field}: {_show(old, field)} → {_show(new, field)}")
    old_attempts = {a.attempt_no: a for a in before.attempts}
    for attempt in after.attempts:
        prev = old_attempts.get(attempt.attempt_no)
        if prev is None:
            changes.append(f"a{attempt.attempt_no}: new attempt {attempt.submission_id}")
            continue
        for field in attempt.__struct_fields__:
            old, new = getattr(prev, field), getattr(attempt, field)
            if old != new:
                changes.append(f"a{attempt.attempt_no}.{field}: {_show(old, field)} → {_show(new, field)}")
    return changes


def nodes_phrase(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _gpus(free: list[float]) -> str:
    return "[" + ", ".join(_show(float(x)) for x in free) + "]"


def summarize(rec: Recorded) -> str:
    """One line of the facts an event carries."""
    e: Any = rec.event
    t = rec.type
    for line in (_task_line, _attempt_line, _attempt_work_line):
        text = line(t, e)
        if text is not None:
            return text
    return _summarize_other(t, e)


def _task_line(t: str, e: Any) -> str | None:
    """A task's own events (None: not one)."""
    if t == "TaskSubmitted":
        d = e.demand
        return (f"{e.user} submitted {e.kind} {e.workload}: {nodes_phrase(d.nnodes)} × "
                f"{d.n_gpus_per_node} GPUs, priority {e.priority}, max {e.max_attempts} attempts")
    if t == "TaskDeferred":
        free = _gpus(e.free_gpus_per_node) if e.free_gpus_per_node else ""
        extra = f" (free GPUs per node {free})" if free and free not in e.message else ""
        return f"deferred ({e.reason}): {e.message}{extra}"
    if t == "RetryScheduled":
        return (f"attempt {e.failed_attempt_no} failed {e.failure_kind.value}; "
                f"retry in {e.delay_s:.0f} s")
    if t == "TaskSucceeded":
        return f"succeeded with attempt {e.attempt_no}"
    if t == "TaskIncomplete":
        return f"incomplete after attempt {e.attempt_no}: {e.reason}"
    if t == "TaskFailed":
        return f"failed ({e.failure_kind.value}) after attempt {e.attempt_no}: {e.error_summary}"
    if t == "TaskCancelRequested":
        return f"cancel requested by {e.by}"
    if t == "TaskCanceled":
        return f"canceled by {e.by}" + (f" (Ray status {e.ray_status})" if e.ray_status else "")
    return None


def _attempt_line(t: str, e: Any) -> str | None:
    """An attempt's start, placement and stops (None: not one of those)."""
    if t == "AttemptStarting":
        return f"attempt {e.attempt_no} starting as {e.submission_id}" + (f" ({e.note})" if e.note else "")
    if t == "AttemptSubmitted":
        return f"attempt {e.attempt_no} accepted by Ray" + (" (recovered after a crash)" if e.recovered else "")
    if t == "AttemptRunning":
        return f"attempt {e.attempt_no} running"
    if t == "AttemptPlacementTimedOut":
        return (f"attempt {e.attempt_no}: placement group(s) {', '.join(e.placement_groups)} PENDING for "
                f"{e.pending_s:.0f} s (timeout {e.timeout_s:g} s): stopping its Ray job, to retry")
    if t == "AttemptStalled":
        at = f"after step {e.step}" if e.step is not None else "before its first step"
        return (f"attempt {e.attempt_no} stalled: no new step for {e.reached_at - e.since:.0f} s {at} "
                f"(bound {e.bound_s:.0f} s: {e.why}): stopping its Ray job, to resume")
    if t == "AttemptInterrupted":
        return f"attempt {e.attempt_no} interrupted by {e.by}: {e.reason}"
    if t == "AttemptStacksCaptured":
        if not e.processes:
            return f"attempt {e.attempt_no}: no stacks ({e.note})"
        tops = "; ".join(f"pid {p.pid}: {p.top_frame}" for p in e.processes[:3])
        return (f"attempt {e.attempt_no}: stacks of {len(e.processes)} process(es) on {e.hostname} "
                f"saved ({e.dump_bytes} bytes; argus stacks {e.task_id}): {tops}")
    if t == "AttemptPreempted":
        return f"attempt {e.attempt_no} preempted ({e.reason}): {e.message}"
    return None


def _attempt_work_line(t: str, e: Any) -> str | None:
    """An attempt's work, its end and its outputs (None: not one of those)."""
    if t == "AttemptProgressed":
        of = f" of {e.total_steps}" if e.total_steps else ""
        each = f", {e.step_time_s:.1f} s a step" if e.step_time_s else ""
        if e.step is None:
            return f"attempt {e.attempt_no} will train {e.total_steps} steps"
        return f"attempt {e.attempt_no} at step {e.step}{of}{each}"
    if t == "AttemptOutputTruncated":
        said = "printed" if e.final else "has printed"
        stop = "; the command was stopped for it" if e.stopped else ""
        return (f"attempt {e.attempt_no} {said} {e.total_bytes} bytes, over its output budget of "
                f"{e.budget_bytes}: {e.dropped_bytes} dropped, the first and last kept in driver.log{stop}")
    if t == "CheckpointObserved":
        return f"attempt {e.attempt_no} saved a checkpoint: step {e.step} in {e.folder}"
    if t == "AttemptTimeLimitReached":
        return (f"attempt {e.attempt_no} reached its time limit of {e.time_limit_s:g} s "
                f"after {e.ran_s:.0f} s running: stopping its Ray job")
    if t == "AttemptEnded":
        parts = [f"attempt {e.attempt_no} ended {e.ray_status}"]
        if e.failure_kind is not None:
            parts.append(e.failure_kind.value)
        if e.exit_code is not None:
            parts.append(f"exit code {e.exit_code}")
        text = ", ".join(parts)
        return text + (f": {e.evidence!r}" if e.evidence else "")
    if t == "AttemptOutputsRemoved":
        whose = "the task's folder" if e.attempt_no is None else f"attempt {e.attempt_no}"
        why = f" ({e.reason})" if e.reason else ""
        more = "" if e.complete else "; more left for the next pass"
        return (f"{whose}: {len(e.paths)} path(s) deleted by {e.by}, rule {e.rule}{why}: "
                f"{e.entries} entries, {e.bytes} bytes{more}")
    return None


def _summarize_other(t: str, e: Any) -> str:
    """Users, tokens, the cluster and the reactor: what ``argus watch`` shows beside tasks."""
    if t == "UserCreated":
        return f"user {e.user_id} created by {e.by}" + (" (admin)" if e.is_admin else "")
    if t in ("UserDisabled", "UserEnabled"):
        return f"user {e.user_id} {t.removeprefix('User').lower()} by {e.by}"
    if t == "UserLimitsSet":
        return (f"user {e.user_id} limited by {e.by}: priority up to {e.max_priority}, "
                f"{'may' if e.may_pin else 'may not'} pin tasks, {e.max_queued or 'the default cap on'} waiting, "
                f"{format(e.max_gpus, 'g') if e.max_gpus else 'no cap on'} GPUs held")
    if t == "TokenIssued":
        return f"token {e.token_id} issued to {e.user_id} by {e.by}"
    if t == "TokenRevoked":
        return f"token {e.token_id} of {e.user_id} revoked by {e.by}"
    if t == "TokenUsed":
        return f"token {e.token_id} of {e.user_id} used"
    if t in ("SshKeyAdded", "SshKeyRevoked"):
        return f"SSH key {e.fingerprint} of {e.user_id} {t.removeprefix('SshKey').lower()} by {e.by}"
    if t == "TeamCreated":
        return f"team {e.team_id} created by {e.by}, share {e.share:g}"
    if t == "TeamMemberMoved":
        return f"user {e.user_id} moved to team {e.team_id} from {e.from_team or 'no team'} by {e.by}"
    if t == "TeamShareSet":
        return f"team {e.team_id}: share {e.share:g}, set by {e.by}"
    if t == "TeamQuotaSet":
        limits = ", ".join(f"{n} {'no limit' if v is None else format(v, 'g')}" for n, v in
                           (("borrowing", e.borrowing_limit), ("lending", e.lending_limit)))
        return (f"team {e.team_id}: quota of {e.gpu_model or 'any model'} {e.nominal_gpus:g} GPUs "
                f"({limits}), set by {e.by}")
    if t == "CapacityObserved":
        gpus = sum(n.total_gpus for n in e.nodes)
        return (f"cluster: {nodes_phrase(len(e.nodes))} with {_show(float(gpus))} GPUs, free GPUs "
                f"per node {_gpus([n.free_gpus for n in e.nodes])}")
    if t == "ClusterUnreachable":
        return f"Ray unreachable: {e.error}"
    if t == "NodeHeld":
        return f"node {e.node_id} {'drained' if e.kind == 'drain' else 'quarantined'} by {e.by}: {e.reason}"
    if t == "NodeReleased":
        return f"node {e.node_id} {'undrained' if e.kind == 'drain' else 'out of quarantine'} ({e.by})"
    if t == "ReactorLeaderElected":
        return f"reactor {e.reactor_id} leads (pid {e.pid} on {e.host})"
    if t == "ReactorLeaderReleased":
        return f"reactor {e.reactor_id} released the lead"
    return t
