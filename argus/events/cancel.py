"""What a user's cancel records, written once for the API and the simulator."""

from __future__ import annotations

from argus.events.catalog import EventBase, TaskCancelRequested, TaskCanceled
from argus.lifecycle import TaskState

__all__ = ["cancel_events"]


def cancel_events(task_id: str, state: TaskState, by: str, now: float) -> list[EventBase]:
    """The request, and, for a task that holds no Ray job yet (waiting), its end at once;
    a task with a job ends when the reactor has stopped it."""
    events: list[EventBase] = [TaskCancelRequested(task_id=task_id, by=by, requested_at=now)]
    if state.is_waiting():
        events.append(TaskCanceled(task_id=task_id, by=by, canceled_at=now))
    return events
