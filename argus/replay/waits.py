"""When a task waited and why: wait segments read from its recorded decisions.

Times are the facts' own times (``submitted_at``, ``decided_at``, …) as the API and the
reactor recorded them, not ``recorded_at``: they are what the decisions were based on.
A wait starts at TaskSubmitted or RetryScheduled and ends at AttemptStarting (or at the
cancel/failure); each TaskDeferred starts a new segment with its reason and numbers.
"""

from __future__ import annotations

from typing import Iterable

import msgspec

from argus.events import (
    AttemptStarting,
    Demand,
    Recorded,
    RetryScheduled,
    TaskCanceled,
    TaskCancelRequested,
    TaskDeferred,
    TaskFailed,
    TaskSubmitted,
)

__all__ = ["WaitSegment", "event_time", "wait_by_reason", "wait_segments"]

_TIME_FIELDS = (
    "submitted_at", "decided_at", "started_at", "ended_at", "finished_at", "requested_at",
    "canceled_at", "observed_at", "created_at", "issued_at", "elected_at", "released_at", "at",
)


def event_time(rec: Recorded) -> float:
    """The time the fact itself carries; ``recorded_at`` for events without one."""
    event = rec.event
    if isinstance(event, RetryScheduled):
        return event.next_run_at - event.delay_s  # the moment the retry was decided
    for name in _TIME_FIELDS:
        value = getattr(event, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return rec.recorded_at


class WaitSegment(msgspec.Struct, frozen=True, kw_only=True):
    """One stretch of waiting with one reason."""

    before_attempt: int  # the attempt this wait led to (or would have)
    state: str  # QUEUED | PENDING_RESOURCES
    reason: str  # queued | retry_backoff | the TaskDeferred reason
    message: str = ""
    start: float
    end: float | None = None  # None: still waiting at the end of the log
    needed: Demand | None = None
    free_gpus_per_node: list[float] = []
    position: int = 0  # log position of the event that started it

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)


_ENDS_WAIT = (AttemptStarting, TaskCancelRequested, TaskCanceled, TaskFailed)


def wait_segments(records: Iterable[Recorded]) -> list[WaitSegment]:
    """The wait segments of one task, from its events in order."""
    out: list[WaitSegment] = []
    open_: WaitSegment | None = None
    next_attempt = 1
    retry_until: float | None = None

    def close(at: float) -> None:
        nonlocal open_
        if open_ is None:
            return
        if open_.reason == "retry_backoff" and retry_until is not None and at > retry_until:
            # The backoff ended at next_run_at; the rest was plain queueing.
            out.append(msgspec.structs.replace(open_, end=retry_until))
            out.append(WaitSegment(before_attempt=open_.before_attempt, state=open_.state,
                                   reason="queued", start=retry_until, end=at,
                                   position=open_.position))
        else:
            out.append(msgspec.structs.replace(open_, end=at))
        open_ = None

    for rec in records:
        event, at = rec.event, event_time(rec)
        if isinstance(event, TaskSubmitted):
            open_ = WaitSegment(before_attempt=1, state="QUEUED", reason="queued", start=at,
                                needed=event.demand, position=rec.position)
        elif isinstance(event, TaskDeferred):
            close(at)
            open_ = WaitSegment(
                before_attempt=next_attempt, state="PENDING_RESOURCES", reason=event.reason,
                message=event.message, start=at, needed=event.needed,
                free_gpus_per_node=list(event.free_gpus_per_node), position=rec.position,
            )
        elif isinstance(event, RetryScheduled):
            close(at)
            next_attempt = event.failed_attempt_no + 1
            retry_until = event.next_run_at
            open_ = WaitSegment(
                before_attempt=next_attempt, state="PENDING_RESOURCES", reason="retry_backoff",
                message=f"attempt {event.failed_attempt_no} failed ({event.failure_kind.value}); "
                f"retry after {event.delay_s:.0f} s",
                start=at, position=rec.position,
            )
        elif isinstance(event, _ENDS_WAIT):
            close(at)
            if isinstance(event, AttemptStarting):
                next_attempt = event.attempt_no + 1
    if open_ is not None:
        out.append(open_)
    return out


def wait_by_reason(segments: Iterable[WaitSegment]) -> dict[str, float]:
    """Seconds waited per reason (closed segments only), in first-seen order."""
    totals: dict[str, float] = {}
    for seg in segments:
        if seg.seconds is not None:
            totals[seg.reason] = totals.get(seg.reason, 0.0) + seg.seconds
    return totals
