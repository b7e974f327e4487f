"""A planned stop: the operator stops Argus (``argus up``'s Ctrl-C) while attempts run.

Each running attempt is recorded as interrupted (``AttemptInterrupted``) before its Ray
nodes go: when Argus is back and Ray has no such job, the attempt ends ``INTERRUPTED``
(not ``CLUSTER_LOST``), and its task is retried at once, before every other waiting
task, from its last checkpoint. The operator is told which tasks were stopped.
"""

from __future__ import annotations

import time

from argus.events import AttemptInterrupted, EventMeta, task_stream
from argus.store import AppendBatch, ConcurrencyConflict, EventStore
from projections import TaskView
from projections.reads import ProjectionReads

__all__ = ["interrupt_running"]


async def interrupt_running(store: EventStore, by: str, reason: str) -> list[TaskView]:
    """Record every attempt that may be running (started, submitted or running) as
    interrupted; returns their tasks as they were. A task that moved on meanwhile (its
    stream is past the version read) is left as it is."""
    now = time.time()
    tasks = [t for t in await ProjectionReads(store).unfinished_tasks()
             if (a := t.latest_attempt) is not None and not a.ended and a.interrupted_at is None]
    stopped = []
    for task in tasks:
        attempt = task.attempts[-1]
        event = AttemptInterrupted(task_id=task.task_id, attempt_no=attempt.attempt_no,
                                   submission_id=attempt.submission_id, by=by, reason=reason, interrupted_at=now)
        try:
            await store.append_batches([AppendBatch(stream=task_stream(task.task_id),
                                                    expected_version=task.stream_version, events=[event],
                                                    owner=task.user)], meta=EventMeta(actor=by))
        except ConcurrencyConflict:
            continue
        stopped.append(task)
    return stopped
