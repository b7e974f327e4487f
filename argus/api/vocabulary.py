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
from argus.lifecycle import AttemptStatus, TaskState
from argus.scheduler import POLICIES
from projections.tasks import TASK_EVENT_TYPES

__all__ = ["StateWord", "Vocabulary", "vocabulary"]


class StateWord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    terminal: bool
    waiting: bool
    holds_ray_job: bool


class EventWord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    about_a_task: bool  # folded into the task's state (its stream is task-<id>)


class Vocabulary(msgspec.Struct, frozen=True, kw_only=True):
    states: list[StateWord]
    attempt_statuses: list[str]
    failure_kinds: list[str]
    event_types: list[EventWord]
    policies: list[str]


def build_vocabulary() -> Vocabulary:
    return Vocabulary(
        states=[StateWord(name=s.value, terminal=s.is_terminal(), waiting=s.is_waiting(),
                          holds_ray_job=s.holds_ray_job()) for s in TaskState],
        attempt_statuses=[s.value for s in AttemptStatus],
        failure_kinds=[k.value for k in FailureKind],
        event_types=[EventWord(name=name, about_a_task=name in TASK_EVENT_TYPES) for name in ALL_EVENT_TYPES],
        policies=sorted(POLICIES),
    )


_VOCABULARY = build_vocabulary()


@get("/vocabulary", tags=["meta"], security=[], cache=3600)
async def vocabulary() -> Vocabulary:
    """Task states, attempt statuses, failure kinds, event types and policies."""
    return _VOCABULARY
