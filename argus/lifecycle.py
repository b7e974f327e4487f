"""Task states and the one table of legal transitions (docs/design.md §4); an attempt's statuses.

The projection folds events through ``next_state``; command handlers (API cancel, the
reactor's decisions) call ``check_transition`` before appending, so an illegal event is
refused before it is written rather than discovered on replay.
"""

from __future__ import annotations

import enum

__all__ = [
    "AttemptStatus",
    "IllegalTransition",
    "NEXT_STATE",
    "RAY_JOB_STATUSES",
    "TaskState",
    "TRANSITIONS",
    "check_transition",
    "next_state",
]


class TaskState(str, enum.Enum):
    QUEUED = "QUEUED"
    PENDING_RESOURCES = "PENDING_RESOURCES"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    # The command exited 0 before its last training step (or a resume trained none): an
    # under-trained model is not a success (verl #7401). Terminal, like SUCCEEDED.
    INCOMPLETE = "INCOMPLETE"
    FAILED = "FAILED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"

    # These three are asked of every task at every event a reactor or a projection folds
    # (40,000 times in a turn after 10,000 arrivals): compared by identity with module
    # constants, as an enum member named through its class is a descriptor call each time.
    def is_terminal(self) -> bool:
        return self is _SUCCEEDED or self is _FAILED or self is _CANCELED or self is _INCOMPLETE

    def is_waiting(self) -> bool:
        """In the queue: not yet handed to Ray (or handed back for a retry)."""
        return self is _QUEUED or self is _PENDING_RESOURCES

    def is_unexamined(self) -> bool:
        """Waiting, and the scheduler has not deferred it yet: no wait reason to show."""
        return self is _QUEUED

    def holds_ray_job(self) -> bool:
        """An attempt may exist in Ray: the reactor must follow (or stop) it."""
        return self is _SUBMITTING or self is _SUBMITTED or self is _RUNNING


_QUEUED, _PENDING_RESOURCES = TaskState.QUEUED, TaskState.PENDING_RESOURCES
_SUBMITTING, _SUBMITTED, _RUNNING = TaskState.SUBMITTING, TaskState.SUBMITTED, TaskState.RUNNING
_SUCCEEDED, _FAILED, _CANCELED = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELED
_INCOMPLETE = TaskState.INCOMPLETE
_TERMINAL = frozenset({_SUCCEEDED, _INCOMPLETE, _FAILED, _CANCELED})


class AttemptStatus(enum.StrEnum):
    """Where one attempt stands (``AttemptView.ray_status``, ``AttemptEnded.ray_status``).

    Two vocabularies share this one field, so they are named apart here: Ray's own job
    statuses (``JobStatus``: what ``JobObservation.status`` may hold) and the phases only
    Argus knows (before Ray answered, or after Ray forgot). A ``StrEnum``: stored and shown
    as the bare value ("FAILED"), so the events' JSON is the same strings as before.
    """

    # Ray's job statuses (ray.job_submission.JobStatus)
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    # Argus's own phases
    STARTING = "STARTING"  # intent recorded (AttemptStarting), Ray's answer not yet
    SUBMITTED = "SUBMITTED"  # Ray accepted it; not yet seen RUNNING
    LOST = "LOST"  # Ray has no record of a job it had accepted (head restarted)
    NOT_SUBMITTED = "NOT_SUBMITTED"  # never reached Ray (refused, or canceled first)

    def is_terminal(self) -> bool:
        """The attempt is over: Ray will not change its status again."""
        return self in _ATTEMPT_TERMINAL

    def is_ray_status(self) -> bool:
        """One of Ray's own job statuses (not an Argus phase)."""
        return self in RAY_JOB_STATUSES

    @classmethod
    def from_ray(cls, value: object) -> "AttemptStatus":
        """Ray's job status (``JobStatus`` or its string) as an AttemptStatus; ValueError
        for anything Ray does not report (an Argus phase included)."""
        status = cls(str(getattr(value, "value", value)))
        if not status.is_ray_status():
            raise ValueError(f"{value!r} is not a Ray job status")
        return status


RAY_JOB_STATUSES = frozenset({
    AttemptStatus.PENDING, AttemptStatus.RUNNING, AttemptStatus.SUCCEEDED,
    AttemptStatus.FAILED, AttemptStatus.STOPPED,
})
_ATTEMPT_TERMINAL = frozenset({
    AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.STOPPED,
    AttemptStatus.LOST, AttemptStatus.NOT_SUBMITTED,
})

S = TaskState
_NON_TERMINAL = [s for s in TaskState if s not in _TERMINAL]

# (event type, state before) -> state after. Events not listed for a state are illegal in it.
# Events that do not move the state (TaskDeferred in PENDING_RESOURCES, AttemptEnded, ...)
# map a state to itself.
TRANSITIONS: dict[str, dict[TaskState, TaskState]] = {
    "TaskSubmitted": {},  # creates the task: handled by next_state(None, ...)
    "TaskDeferred": {S.QUEUED: S.PENDING_RESOURCES, S.PENDING_RESOURCES: S.PENDING_RESOURCES},
    "AttemptStarting": {S.QUEUED: S.SUBMITTING, S.PENDING_RESOURCES: S.SUBMITTING},
    "AttemptSubmitted": {S.SUBMITTING: S.SUBMITTED, S.CANCELING: S.CANCELING},
    "AttemptRunning": {S.SUBMITTED: S.RUNNING, S.SUBMITTING: S.RUNNING, S.CANCELING: S.CANCELING},
    "AttemptTimeLimitReached": {S.RUNNING: S.RUNNING},
    "AttemptPlacementTimedOut": {S.RUNNING: S.RUNNING},
    "AttemptStalled": {S.RUNNING: S.RUNNING},
    "AttemptStacksCaptured": {S.RUNNING: S.RUNNING, S.CANCELING: S.CANCELING},
    "AttemptInterrupted": {S.SUBMITTING: S.SUBMITTING, S.SUBMITTED: S.SUBMITTED, S.RUNNING: S.RUNNING,
                           S.CANCELING: S.CANCELING},
    "AttemptPreempted": {S.SUBMITTED: S.SUBMITTED, S.RUNNING: S.RUNNING},
    "CheckpointObserved": {S.RUNNING: S.RUNNING},
    "AttemptProgressed": {S.RUNNING: S.RUNNING},
    # Recorded while it runs, and with the whole count just before its AttemptEnded.
    "AttemptOutputTruncated": {S.SUBMITTED: S.SUBMITTED, S.RUNNING: S.RUNNING, S.CANCELING: S.CANCELING},
    # The attempt's end is recorded first; the task's own outcome follows as its own event.
    "AttemptEnded": {
        S.SUBMITTING: S.SUBMITTING,
        S.SUBMITTED: S.SUBMITTED,
        S.RUNNING: S.RUNNING,
        S.CANCELING: S.CANCELING,
    },
    "RetryScheduled": {
        S.SUBMITTING: S.PENDING_RESOURCES,
        S.SUBMITTED: S.PENDING_RESOURCES,
        S.RUNNING: S.PENDING_RESOURCES,
    },
    "TaskSucceeded": {S.SUBMITTED: S.SUCCEEDED, S.RUNNING: S.SUCCEEDED, S.CANCELING: S.SUCCEEDED},
    "TaskIncomplete": {S.SUBMITTED: S.INCOMPLETE, S.RUNNING: S.INCOMPLETE, S.CANCELING: S.INCOMPLETE},
    "TaskFailed": {
        S.SUBMITTING: S.FAILED,
        S.SUBMITTED: S.FAILED,
        S.RUNNING: S.FAILED,
        S.CANCELING: S.FAILED,
    },
    "TaskCancelRequested": {s: S.CANCELING for s in _NON_TERMINAL},
    "TaskCanceled": {s: S.CANCELED for s in _NON_TERMINAL},
    # A finished task's files deleted (by their owner or the retention policy): only a
    # task that runs nothing any more, so no attempt of it can be writing there.
    "AttemptOutputsRemoved": {s: s for s in _TERMINAL},
}


# TRANSITIONS flattened, (state, event type) -> next state: one lookup per event where a
# rebuild folds millions of them. A pair that is missing is an illegal transition.
NEXT_STATE: dict[tuple[TaskState, str], TaskState] = {
    (before, event_type): after
    for event_type, moves in TRANSITIONS.items()
    for before, after in moves.items()
}


class IllegalTransition(ValueError):
    """An event that the task's current state does not allow."""


def next_state(state: TaskState | None, event_type: str) -> TaskState:
    """The state after ``event_type`` is applied in ``state`` (None: no task yet)."""
    if state is None:
        if event_type == "TaskSubmitted":
            return TaskState.QUEUED
        raise IllegalTransition(f"{event_type} before TaskSubmitted")
    after = NEXT_STATE.get((state, event_type))
    if after is None:
        if event_type == "TaskSubmitted":
            raise IllegalTransition("TaskSubmitted for a task that already exists")
        raise IllegalTransition(f"{event_type} is not allowed in state {state.value}")
    return after


def check_transition(state: TaskState | None, event_type: str) -> TaskState:
    """Same as ``next_state``; named for command handlers that validate before appending."""
    return next_state(state, event_type)
