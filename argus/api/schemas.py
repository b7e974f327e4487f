"""Request and response types of the REST API (msgspec Structs; OpenAPI is generated)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from argus.service.ids import USER_ID_RULE

__all__ = [
    "AttemptOut", "ClusterNodeOut", "ClusterOut", "CreateUserIn", "DemandOut", "FileEntry",
    "FileListing", "IssueTokenIn", "LoginIn", "MeOut", "ProgressOut", "ProgressPoint",
    "QueueEntryOut", "SpecOut", "SubmitIn", "SubmitOut", "TaskDetail", "TaskList",
    "TaskStateOut", "TaskSummary", "TimelineEntry", "TokenOut", "TokenIssuedOut", "UserOut",
    "ValidateError", "ValidateOut",
]

# No `pattern` here: msgspec would refuse a bad id with Litestar's generic "Validation
# failed" and a regex; the command handler refuses it with the rule in words instead.
UserId = Annotated[str, msgspec.Meta(extra_json_schema={"description": f"User id: {USER_ID_RULE}."})]
Label = Annotated[str, msgspec.Meta(max_length=200)]


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


class DemandOut(msgspec.Struct, kw_only=True):
    nnodes: int
    n_gpus_per_node: int
    cpus_per_node: float


class TaskSummary(msgspec.Struct, kw_only=True):
    task_id: str
    user: str
    workload: str
    kind: str
    state: str
    priority: int
    created_at: float
    updated_at: float
    attempts: int
    failure_kind: str | None = None
    error_summary: str | None = None
    wait_reason: str | None = None
    wait_message: str = ""
    name: str = ""
    gpus: int = 0  # the whole gang: nnodes × n_gpus_per_node
    started_at: float | None = None  # the latest attempt's
    ended_at: float | None = None
    step: int | None = None  # last training step seen in a running task's log
    total_steps: int | None = None


class TaskList(msgspec.Struct, kw_only=True):
    items: list[TaskSummary]
    total: int
    limit: int
    offset: int


class AttemptOut(msgspec.Struct, kw_only=True):
    attempt_no: int
    submission_id: str
    ray_status: str
    failure_kind: str | None = None
    evidence: str = ""
    exit_code: int | None = None
    decided_at: float
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None


class TaskDetail(msgspec.Struct, kw_only=True):
    task_id: str
    user: str
    workload: str
    kind: str
    state: str
    priority: int
    max_attempts: int
    demand: DemandOut
    created_at: float
    updated_at: float
    attempts: list[AttemptOut]
    failure_kind: str | None = None
    error_summary: str = ""
    queue_position: int | None = None
    wait_reason: str | None = None
    wait_message: str = ""
    next_run_at: float | None = None
    waiting_since: float | None = None
    warnings: list[str] = []
    name: str = ""
    total_steps: int | None = None


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


class QueueEntryOut(msgspec.Struct, kw_only=True):
    position: int
    task_id: str | None
    user: str | None
    priority: int
    demand: DemandOut
    state: str
    wait_reason: str | None = None
    wait_message: str = ""
    next_run_at: float | None = None
    waiting_since: float | None = None


class ClusterNodeOut(msgspec.Struct, kw_only=True):
    node_id: str
    ip: str
    total_gpus: float
    free_gpus: float
    total_cpus: float
    free_cpus: float


class ClusterOut(msgspec.Struct, kw_only=True):
    reachable: bool | None
    observed_at: float | None
    error: str | None
    nodes: list[ClusterNodeOut]
    head: dict[str, Any] | None = None


class CreateUserIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    user_id: UserId
    display_name: Label = ""
    is_admin: bool = False


class TokenOut(msgspec.Struct, kw_only=True):
    token_id: str
    label: str
    revoked: bool
    issued_at: float
    last_used_at: float | None = None  # coarse: v2.auth.token_use_resolution_s


class UserOut(msgspec.Struct, kw_only=True):
    user_id: str
    display_name: str
    is_admin: bool
    disabled: bool
    created_at: float


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


class FileListing(msgspec.Struct, kw_only=True):
    area: str
    path: str
    entries: list[FileEntry]
    truncated: bool = False  # more entries than one listing holds (v2 lists at most 1000)
