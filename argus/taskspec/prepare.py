"""From a submitted document to what the ``TaskSubmitted`` event records: parse, expand
``$HOME``, check, build the command and the demand. Nothing is written here; the API
appends the event only when this returns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from argus.config import TaskSpecConfig
from argus.events.catalog import Demand
from argus.taskspec.builders import build_basic_command, demand_for
from argus.taskspec.checks import check_command, check_override_paths
from argus.taskspec.errors import TaskSpecError
from argus.taskspec.expand import expand_home
from argus.taskspec.paths import PathPolicy
from argus.taskspec.spec import (
    AdvancedTaskSpec,
    BasicTaskSpec,
    TaskSpec,
    encode_taskspec,
    parse_taskspec_with_warnings,
)

__all__ = ["PreparedTask", "prepare_task"]

# One path component: user names and task ids become directory names.
_COMPONENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# The expanded home is pasted into the command unquoted: only characters bash leaves alone.
_ROOT_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")


class PreparedTask(msgspec.Struct, frozen=True, kw_only=True):
    """A checked task, ready to become a ``TaskSubmitted`` event."""

    kind: str  # "basic" | "advanced"
    workload: str  # ppo | grpo | sft
    spec: dict[str, Any]  # encode_taskspec(spec)
    command_raw: str  # advanced: the user's command as written; basic: the generated one
    command: str  # $HOME expanded: what the driver runs with `bash -lc`
    demand: Demand
    priority: int
    max_attempts: int
    warnings: list[str]


def _check_component(value: str, field: str) -> None:
    if not _COMPONENT_RE.match(value) or ".." in value:
        raise TaskSpecError(
            field, f"{value[:80]!r} is not a valid name (letters, digits, '_', '.', '-'; no '..')"
        )


def _check_basic_fields(spec: BasicTaskSpec, policy: PathPolicy, expand: Any) -> None:
    """Field-level path checks, so the message names the spec field, not the override."""
    policy.check_model(expand(spec.model_id), "model_id")
    policy.check_data(expand(spec.train_file), "train_file")
    if spec.val_file is not None:
        policy.check_data(expand(spec.val_file), "val_file")
    for i, override in enumerate(spec.extra_overrides):
        key, sep, value = override.partition("=")
        if sep:
            check_override_paths(key.lstrip("+~"), expand(value), policy, f"extra_overrides[{i}]")


def prepare_task(
    document: str | bytes | Mapping[str, Any],
    *,
    user: str,
    task_id: str,
    shared_root: Path,
    config: TaskSpecConfig | None = None,
    parsed: tuple[TaskSpec, list[str]] | None = None,
) -> PreparedTask:
    """Parse, expand, check and build one submitted TaskSpec; raises TaskSpecError.
    ``parsed``: the spec and its warnings, when the caller parsed ``document`` already."""
    config = config or TaskSpecConfig()
    _check_component(user, "user")
    _check_component(task_id, "task_id")
    if not _ROOT_RE.match(str(shared_root)):
        raise TaskSpecError(
            "shared_root", f"{str(shared_root)[:120]!r} must be an absolute path of letters, "
            "digits, '_', '.', '/' and '-' (it is pasted into commands unquoted)",
        )
    spec, warnings = parsed if parsed is not None else parse_taskspec_with_warnings(document, config=config)
    policy = PathPolicy(shared_root=shared_root, user=user)

    def expand(text: str) -> str:
        return expand_home(text, user=user, shared_root=policy.root)

    if isinstance(spec, AdvancedTaskSpec):
        kind = "advanced"
        command_raw = spec.command
    else:
        kind = "basic"
        _check_basic_fields(spec, policy, expand)
        command_raw = build_basic_command(spec, user=user, task_id=task_id)
    command = expand(command_raw)
    # The generated command goes through the same checks: one policy for every command.
    _parsed, command_warnings = check_command(
        command,
        policy=policy,
        nnodes=spec.nnodes,
        n_gpus_per_node=spec.n_gpus_per_node,
        workload=spec.workload,
        allowed_modules=config.allowed_modules,
    )
    warnings.extend(command_warnings)
    return PreparedTask(
        kind=kind,
        workload=spec.workload,
        spec=encode_taskspec(spec),
        command_raw=command_raw,
        command=command,
        demand=demand_for(spec.nnodes, spec.n_gpus_per_node, workload=spec.workload),
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        warnings=warnings,
    )
