"""``GET /vocabulary``: the words the server speaks, for clients that render them.

Task states (and which are terminal or waiting), attempt statuses, failure kinds, event
types and scheduling policies, built from the enums and the event catalog themselves, so
the WebUI (and any client) learns them from the server instead of keeping copies that
drift. Public: it says nothing about anyone's tasks.
"""

from __future__ import annotations

import msgspec
from litestar import get

from argus.events import ALL_EVENT_TYPES, FailureKind
from argus.lifecycle import NEXT_STATE, AttemptStatus, TaskState
from argus.scheduler import POLICIES
from projections.tasks import TASK_EVENT_TYPES

__all__ = ["EventWord", "StateWord", "Vocabulary", "build_vocabulary", "vocabulary"]

_CANCEL = "TaskCancelRequested"


class StateWord(msgspec.Struct, frozen=True, kw_only=True):
    """A task state and what it means (``TaskState``'s predicates and transitions)."""

    name: str
    terminal: bool
    waiting: bool
    unexamined: bool  # waiting, not yet deferred by the scheduler (no wait reason yet)
    holds_ray_job: bool
    cancelable: bool  # a cancel request would move it (not terminal, not already canceling)


class EventWord(msgspec.Struct, frozen=True, kw_only=True):
    """An event type of the catalog."""

    name: str
    about_a_task: bool  # folded into the task's state (its stream is task-<id>)
    leads_to: list[str]  # the task states it can put a task in (empty: not a task event)


class Vocabulary(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``GET /vocabulary`` says."""

    states: list[StateWord]
    attempt_statuses: list[str]
    failure_kinds: list[str]
    event_types: list[EventWord]
    policies: list[str]


def _leads_to(event_type: str) -> list[str]:
    """The states ``event_type`` can end in, in ``TaskState``'s order (from NEXT_STATE)."""
    after = {a for (_, e), a in NEXT_STATE.items() if e == event_type}
    if event_type == "TaskSubmitted":
        after.add(TaskState.QUEUED)  # creates the task: next_state(None, ...)
    return [s.value for s in TaskState if s in after]


def build_vocabulary() -> Vocabulary:
    """The vocabulary, read from the enums, the transition table and the event catalog."""
    return Vocabulary(
        states=[StateWord(name=s.value, terminal=s.is_terminal(), waiting=s.is_waiting(),
                          unexamined=s.is_unexamined(), holds_ray_job=s.holds_ray_job(),
                          cancelable=NEXT_STATE.get((s, _CANCEL), s) is not s) for s in TaskState],
        attempt_statuses=[s.value for s in AttemptStatus],
        failure_kinds=[k.value for k in FailureKind],
        event_types=[EventWord(name=name, about_a_task=name in TASK_EVENT_TYPES, leads_to=_leads_to(name))
                     for name in ALL_EVENT_TYPES],
        policies=sorted(POLICIES),
    )


_VOCABULARY = build_vocabulary()


@get("/vocabulary", tags=["meta"], security=[], cache=3600)
async def vocabulary() -> Vocabulary:
    """Task states, attempt statuses, failure kinds, event types and policies."""
    return _VOCABULARY
