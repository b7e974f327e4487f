"""The event catalog: every fact Argus records, as msgspec Structs in one tagged union.

Rules (docs/design.md §3):
- Payloads hold facts, not derived state: what was asked, decided or observed, and why.
- Each type has a ``SCHEMA`` version. A change that old readers cannot ignore bumps it and
  registers an upcaster in ``argus.events.codec``; stored events are never rewritten.
- The class name is the ``type`` column and the union tag.

Streams: ``task-<task_id>`` (its events in ``argus.events.task_events``), ``user-<user_id>``,
``teams`` (``argus.events.team_events``), ``cluster``, ``reactor`` (below).
Times are UNIX seconds (float, UTC).
"""

from __future__ import annotations

from typing import Union

from argus.events.base import EventBase
# The task stream's events and why an attempt fails: their own module, named here too.
from argus.events.task_events import (
    AttemptEnded,
    AttemptInterrupted,
    AttemptOutputsRemoved,
    AttemptOutputTruncated,
    AttemptPlacementTimedOut,
    AttemptPreempted,
    AttemptProgressed,
    AttemptRunning,
    AttemptStacksCaptured,
    AttemptStalled,
    AttemptStarting,
    AttemptSubmitted,
    AttemptTimeLimitReached,
    CheckpointObserved,
    FailureKind,
    RetryScheduled,
    TaskCancelRequested,
    TaskCanceled,
    TaskDeferred,
    TaskFailed,
    TaskIncomplete,
    TaskSubmitted,
    TaskSucceeded,
)
# The value objects events carry, here with the events that carry them (``__all__``).
from argus.events.values import Demand, HoldKind, NodeCapacity, StackedProcess, SubmissionPayload
# Teams (issue 56): their own module, named here too.
from argus.events.team_events import TeamCreated, TeamMemberMoved, TeamQuotaSet, TeamShareSet, teams_stream

__all__ = [
    "ALL_EVENT_TYPES",
    "AttemptEnded",
    "AttemptInterrupted",
    "AttemptOutputsRemoved",
    "AttemptOutputTruncated",
    "AttemptRunning",
    "AttemptStarting",
    "AttemptSubmitted",
    "AttemptPlacementTimedOut",
    "AttemptPreempted",
    "AttemptStacksCaptured",
    "AttemptStalled",
    "AttemptProgressed",
    "AttemptTimeLimitReached",
    "CapacityObserved",
    "CheckpointObserved",
    "ClusterUnreachable",
    "Demand",
    "Event",
    "EventBase",
    "FailureKind",
    "HoldKind",
    "NodeCapacity",
    "NodeHeld",
    "NodeReleased",
    "StackedProcess",
    "ReactorLeaderElected",
    "ReactorLeaderReleased",
    "RetryScheduled",
    "SshKeyAdded",
    "SshKeyRevoked",
    "SubmissionPayload",
    "TaskCancelRequested",
    "TaskCanceled",
    "TaskDeferred",
    "TaskFailed",
    "TaskIncomplete",
    "TaskSubmitted",
    "TaskSucceeded",
    "TeamCreated",
    "TeamMemberMoved",
    "TeamQuotaSet",
    "TeamShareSet",
    "TokenIssued",
    "TokenRevoked",
    "TokenUsed",
    "UserCreated",
    "UserDisabled",
    "UserEnabled",
    "UserLimitsSet",
    "cluster_stream",
    "reactor_stream",
    "task_stream",
    "teams_stream",
    "user_stream",
]


def task_stream(task_id: str) -> str:
    return f"task-{task_id}"


def user_stream(user_id: str) -> str:
    return f"user-{user_id}"


cluster_stream = "cluster"
reactor_stream = "reactor"



# ---------------------------------------------------------------------------------------
# User stream: user-<user_id>


class UserCreated(EventBase, frozen=True, kw_only=True, tag="UserCreated"):
    user_id: str
    display_name: str = ""
    is_admin: bool = False
    by: str
    created_at: float


class UserDisabled(EventBase, frozen=True, kw_only=True, tag="UserDisabled"):
    user_id: str
    by: str
    at: float


class UserEnabled(EventBase, frozen=True, kw_only=True, tag="UserEnabled"):
    user_id: str
    by: str
    at: float


class UserLimitsSet(EventBase, frozen=True, kw_only=True, tag="UserLimitsSet"):
    """An admin set what the user's tasks may ask for: the highest ``priority``, whether
    they may be ``preemptible: false``, how many may wait at once, and how many GPUs
    their running tasks may hold together (0: no cap). Admins' own tasks are not limited."""

    user_id: str
    max_priority: int = 0
    may_pin: bool = False  # may submit preemptible: false
    max_queued: int = 0
    max_gpus: float = 0.0  # GPUs held at once by their admitted tasks (0: no cap)
    by: str
    at: float


class TokenIssued(EventBase, frozen=True, kw_only=True, tag="TokenIssued"):
    """A token was issued; only its SHA-256 hash is recorded (the token is shown once)."""

    user_id: str
    token_id: str
    token_hash: str
    label: str = ""
    by: str
    issued_at: float


class TokenRevoked(EventBase, frozen=True, kw_only=True, tag="TokenRevoked"):
    user_id: str
    token_id: str
    by: str
    at: float


class TokenUsed(EventBase, frozen=True, kw_only=True, tag="TokenUsed"):
    """A token authenticated a request (API). Coarse on purpose: recorded at most once per
    ``v2.auth.token_use_resolution_s`` per token, not per request."""

    user_id: str
    token_id: str
    at: float


class SshKeyAdded(EventBase, frozen=True, kw_only=True, tag="SshKeyAdded"):
    """A public key that opens the SFTP door as ``user_id`` (argus.sftp). ``fingerprint``
    (``SHA256:…``, as ``ssh-keygen -l`` prints it) names it and is unique among the keys
    in use; ``public_key`` is its OpenSSH line, comment dropped."""

    user_id: str
    key_id: str
    fingerprint: str
    public_key: str
    label: str = ""
    by: str
    added_at: float


class SshKeyRevoked(EventBase, frozen=True, kw_only=True, tag="SshKeyRevoked"):
    """The key no longer authenticates; SFTP sessions it opened are closed."""

    user_id: str
    key_id: str
    fingerprint: str
    by: str
    at: float


# ---------------------------------------------------------------------------------------
# Cluster stream: capacity observations worth keeping (appended when they change)


class CapacityObserved(EventBase, frozen=True, kw_only=True, tag="CapacityObserved"):
    """Free capacity per alive worker node changed (reactor)."""

    nodes: list[NodeCapacity]
    observed_at: float


class ClusterUnreachable(EventBase, frozen=True, kw_only=True, tag="ClusterUnreachable"):
    """Ray could not be reached: capacity is unknown and nothing is admitted (reactor)."""

    error: str
    observed_at: float


class NodeHeld(EventBase, frozen=True, kw_only=True, tag="NodeHeld"):
    """A worker node admits no new attempt (its running ones go on): ``kind`` "drain", an
    admin's, until undrained; "quarantine", the reactor's, while processes of attempts that
    ended still run there (``reason``: their pids and commands), until it is clean
    (docs/runs.md, "Node hygiene")."""

    node_id: str
    ip: str = ""
    kind: HoldKind
    reason: str
    by: str
    held_at: float


class NodeReleased(EventBase, frozen=True, kw_only=True, tag="NodeReleased"):
    """The node's hold of ``kind`` is lifted: undrained by an admin, or found clean."""

    node_id: str
    kind: HoldKind
    by: str
    released_at: float


# ---------------------------------------------------------------------------------------
# Reactor stream: leadership


class ReactorLeaderElected(EventBase, frozen=True, kw_only=True, tag="ReactorLeaderElected"):
    """This reactor took the lease and now leads (it alone talks to Ray)."""

    reactor_id: str
    host: str
    pid: int
    lease_until: float
    elected_at: float


class ReactorLeaderReleased(EventBase, frozen=True, kw_only=True, tag="ReactorLeaderReleased"):
    """The leader gave the lease back on a clean shutdown."""

    reactor_id: str
    released_at: float


Event = Union[
    TaskSubmitted,
    TaskDeferred,
    AttemptStarting,
    AttemptSubmitted,
    AttemptRunning,
    AttemptTimeLimitReached,
    AttemptPlacementTimedOut,
    AttemptStalled,
    AttemptStacksCaptured,
    AttemptInterrupted,
    AttemptPreempted,
    AttemptProgressed,
    AttemptOutputTruncated,
    CheckpointObserved,
    AttemptEnded,
    RetryScheduled,
    TaskSucceeded,
    TaskIncomplete,
    TaskFailed,
    TaskCancelRequested,
    TaskCanceled,
    AttemptOutputsRemoved,
    UserCreated,
    UserDisabled,
    UserEnabled,
    UserLimitsSet,
    TokenIssued,
    TokenRevoked,
    TokenUsed,
    SshKeyAdded,
    SshKeyRevoked,
    TeamCreated,
    TeamMemberMoved,
    TeamShareSet,
    TeamQuotaSet,
    CapacityObserved,
    ClusterUnreachable,
    NodeHeld,
    NodeReleased,
    ReactorLeaderElected,
    ReactorLeaderReleased,
]

ALL_EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.__struct_config__.tag: cls for cls in Event.__args__  # type: ignore[attr-defined]
}
