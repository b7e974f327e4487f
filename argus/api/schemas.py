"""Request and response types of the REST API (msgspec Structs; OpenAPI is generated).

What the API returns about tasks, the queue and the cluster is the projections' own read
Structs (``projections.tasks_read``, ``projections.queue``, ``argus.events.NodeCapacity``),
re-exported here: one shape per concept, never retyped.
"""

from __future__ import annotations

from typing import Literal, Annotated, Any

import msgspec

from argus.api.filepath import DEST_PATTERN, MAX_CHARS
from argus.events import NodeCapacity
from argus.service.ids import USER_ID_RE, USER_ID_RULE
from argus.service.limits import UserLimits  # a request body: its unknown fields are refused, as declared
from argus.service.teams import CreateTeam, SetQuota, SetShare  # request bodies too (docs/teams.md)
from argus.views.cluster import NodeLedgerOut
from projections.cluster import NodeHold
from projections.queue import QueueEntry, QueuePage
from projections.tasks_read import TaskDetail, TaskPage, TaskSummary
from projections.users import TokenSummary, UserSummary

__all__ = [
    "AddSshKeyIn", "SftpOut", "CreateTeam", "MoveMemberIn", "SetQuota", "SetShare",
    "ClusterOut", "CreateUserIn", "FileEntry", "FileListing", "FileOpIn", "FilesOverview", "IssueTokenIn", "LoginIn",
    "DrainIn", "MeOut", "NodeCapacity", "NodeHold", "ProgressOut", "ProgressPoint", "QueueEntry", "QueuePage", "SpecOut",
    "NodeSeenOut", "SubmitIn", "SubmitOut", "TaskDetail", "TaskList", "TaskStateOut", "TaskSummary",
    "TimelineEntry", "TokenOut", "TokenIssuedOut", "UserLimits", "UserOut", "ValidateError", "ValidateOut",
]

# No msgspec `pattern` here: msgspec would refuse a bad id with Litestar's generic
# "Validation failed" and a regex; the command handler refuses it with the rule in words
# instead. The OpenAPI still declares the pattern (Litestar reads "extra" as schema fields).
UserId = Annotated[str, msgspec.Meta(extra_json_schema={
    "description": f"User id: {USER_ID_RULE}.", "extra": {"pattern": USER_ID_RE.pattern}})]
Label = Annotated[str, msgspec.Meta(max_length=200)]


class MoveMemberIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /teams/{id}/members``: the user to move into the team (out of their old one)."""

    user_id: UserId


class LoginIn(msgspec.Struct, kw_only=True):
    token: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class MeOut(msgspec.Struct, kw_only=True):
    user_id: str
    is_admin: bool
    display_name: str = ""
    # This deployment's paths (what `$HOME`, `$HOME/common/...` expand to for training).
    shared_root: str = ""
    home: str = ""


class SubmitIn(msgspec.Struct, kw_only=True):
    """JSON submission: ``spec`` is the YAML text (or the spec object itself)."""

    spec: str | dict[str, Any]


class SubmitOut(msgspec.Struct, kw_only=True):
    task_id: str
    state: str
    warnings: list[str]


class ValidateError(msgspec.Struct, kw_only=True):
    field: str
    message: str


class ValidateOut(msgspec.Struct, kw_only=True):
    ok: bool
    warnings: list[str]
    errors: list[ValidateError]
    # A dry run (sbatch --test-only): were it submitted now, its place in the policy's order
    # (1: next) and when it would start, estimated as the queue's own (null: not known).
    position: int | None = None
    expected_start: float | None = None
    # ... and the 80 % interval of that start (start_latest null: no upper end known).
    start_earliest: float | None = None
    start_latest: float | None = None


# Tasks: the shapes beside the projection they are read from (one shape per concept).
TaskList = TaskPage


class SpecOut(msgspec.Struct, kw_only=True):
    task_id: str
    kind: str
    workload: str
    spec_raw: str
    spec: dict[str, Any]
    command_raw: str
    command: str
    warnings: list[str]


class TaskStateOut(msgspec.Struct, kw_only=True):
    task_id: str
    state: str


class TimelineEntry(msgspec.Struct, kw_only=True):
    position: int
    version: int
    type: str
    recorded_at: float
    actor: str
    data: dict[str, Any]


class ProgressPoint(msgspec.Struct, kw_only=True):
    step: int
    metrics: dict[str, float]


class ProgressOut(msgspec.Struct, kw_only=True):
    task_id: str
    attempt_no: int | None
    total_steps: int | None
    last_step: int | None
    points: list[ProgressPoint]


class NodeSeenOut(msgspec.Struct, kw_only=True):
    """A worker node's own watchdog's last report (``argus.nodepool.keeper``, every few
    seconds while the node lives): when it last looked, and the host it runs on."""

    node_id: str
    hostname: str
    checked_at: float


class ClusterOut(msgspec.Struct, kw_only=True):
    """The cluster as the reactor last saw it (``projections.cluster``), the ledger of
    committed demand on each node, and the head's discovery record."""

    reachable: bool | None
    observed_at: float | None
    error: str | None
    nodes: list[NodeCapacity]
    head: dict[str, Any] | None = None
    ledger: list[NodeLedgerOut] = []
    holds: list[NodeHold] = []  # nodes that admit no new attempt: drained, or quarantined
    # When each node was last seen alive (its watchdog's report): ``observed_at`` is the
    # last *change* of capacity (an unchanged cluster records nothing new).
    seen: list[NodeSeenOut] = []


class DrainIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Why the node is drained (shown to the users whose tasks wait for it)."""

    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class CreateUserIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    user_id: UserId
    display_name: Label = ""
    is_admin: bool = False


# Users and tokens as the users projection reads them.
TokenOut = TokenSummary
UserOut = UserSummary


class IssueTokenIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    label: Label = ""


class TokenIssuedOut(msgspec.Struct, kw_only=True):
    user_id: str
    token_id: str
    token: str


class FileEntry(msgspec.Struct, kw_only=True):
    name: str
    is_dir: bool
    size: int
    modified: float
    type: str = "file"  # file | dir | link | other (job folders: links are listed, not followed)


class FilesOverview(msgspec.Struct, kw_only=True):
    """``GET /files``: the areas, and the caller's storage against their limit."""

    areas: list[str]
    used_bytes: int  # in datasets/, models/, code/
    staged_bytes: int  # reserved by uploads in progress (their declared lengths)
    limit_bytes: int  # 0: no limit
    exact: bool = True  # false: too many files to count; used_bytes is a lower bound
    summary: str = ""  # e.g. "1.2 GiB of 100 GiB used, 98.8 GiB free"


class FileOpIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /files/{area}/{path}``: ``mkdir`` makes the folder (and those above it);
    ``move`` renames or moves it to ``to`` (area/path, in the caller's own areas)."""

    op: Literal["mkdir", "move"]
    # Checked by the handler (files.dest_of) with a message; the document states the pattern.
    to: Annotated[str, msgspec.Meta(extra_json_schema={
        "description": "move: the destination, an area and a path in it (as the URL's path); "
                       "mkdir: unused", "extra": {"pattern": DEST_PATTERN, "maxLength": MAX_CHARS}})] = ""


class FileListing(msgspec.Struct, kw_only=True):
    area: str
    path: str
    entries: list[FileEntry]
    truncated: bool = False  # more entries than one listing holds (v2 lists at most 1000)


class AddSshKeyIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One OpenSSH public key line (the content of ``~/.ssh/id_ed25519.pub``)."""

    public_key: Annotated[str, msgspec.Meta(max_length=16_384)]
    label: Annotated[str, msgspec.Meta(max_length=200)] = ""


class SftpOut(msgspec.Struct, kw_only=True):
    """The SFTP door of this server: off (``port`` 0), or where to connect and the host
    key's fingerprint to check on first connect."""

    enabled: bool
    port: int = 0
    host_key_fingerprint: str = ""
    password_auth: bool = False
