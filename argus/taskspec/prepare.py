"""From a submitted document to what the ``TaskSubmitted`` event records: parse, expand
``$HOME``, check, build the command and the demand. Nothing is written here; the API
appends the event only when this returns.

Problems are collected rather than raised one at a time: the fields, their paths, the
command's words, then the input files that do not exist, all in one TaskSpecError."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, NoReturn

import msgspec

from argus.config import MIN_OUTPUT_BUDGET, TaskSpecConfig
from argus.events.catalog import Demand
from argus.taskspec.builders import TRANSFER_QUEUE_NODES, WORKER_RESOURCE, build_basic_command, demand_for
from argus.taskspec.checks import check_command, check_override_paths
from argus.taskspec.command import ParsedCommand
from argus.taskspec.sizes import parse_bytes
from argus.taskspec.timelimit import time_limit_seconds
from argus.taskspec.errors import Problems, TaskSpecError
from argus.taskspec.expand import expand_home
from argus.taskspec.paths import PathPolicy
from argus.taskspec.spec import (
    BasicTaskSpec,
    CheckedSpec,
    TaskSpec,
    check_taskspec,
    encode_taskspec,
)

__all__ = ["PreparedTask", "prepare_task"]

# One path component: user names and task ids become directory names.
_COMPONENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# The expanded home is pasted into the command unquoted: only characters bash leaves alone.
_ROOT_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")
# Where a path may end inside a command or Hydra value (as the path checks split them).
_WORD_SPLIT_RE = re.compile(r"[\s,\[\]'\"=]+")


class PreparedTask(msgspec.Struct, frozen=True, kw_only=True):
    """A checked task, ready to become a ``TaskSubmitted`` event."""

    kind: str  # "basic" | "advanced"
    workload: str  # ppo | grpo | sft
    spec: dict[str, Any]  # encode_taskspec(spec)
    command_raw: str  # advanced: the user's command as written; basic: the generated one
    command: str  # $HOME expanded, python3 made the deployment's interpreter: what runs
    demand: Demand
    priority: int
    max_attempts: int
    warnings: list[str]
    time_limit_s: float | None = None  # per attempt, from when it runs
    stall_timeout_s: float | None = None  # no new step for this long: stalled
    preemptible: bool | None = None  # None: not said (argus.service.limits)
    output_budget_bytes: int | None = None  # the spec's output_budget (None: the admin's)


def _check_component(value: str, field: str) -> None:
    if not _COMPONENT_RE.match(value) or ".." in value:
        raise TaskSpecError(
            field, f"{value[:80]!r} is not a valid name (letters, digits, '_', '.', '-'; no '..')"
        )


def _written_forms(text: str, expand: Callable[[str], str]) -> dict[str, str]:
    """Each ``$HOME`` path in ``text`` by its expanded form, so that messages can show a
    path as the user wrote it."""
    forms: dict[str, str] = {}
    for piece in _WORD_SPLIT_RE.split(text):
        if "$" in piece:
            forms.setdefault(expand(piece), piece)
    return forms


def _check_basic_fields(values: Mapping[str, Any], policy: PathPolicy,
                        expand: Callable[[str], str], problems: Problems) -> None:
    """Field-level path checks, so the message names the spec field, not the override;
    each field that passed its own checks, whatever the others did."""
    for name, check in (("model_id", policy.check_model), ("train_file", policy.check_data),
                        ("val_file", policy.check_data)):
        raw = values.get(name)
        if raw is not None:
            policy.written.update(_written_forms(raw, expand))
            with problems.catch():
                check(expand(raw), name)
    for i, override in enumerate(values.get("extra_overrides", ())):
        key, sep, value = override.partition("=")
        if sep:
            policy.written.update(_written_forms(value, expand))
            with problems.catch():
                check_override_paths(key.lstrip("+~"), expand(value), policy,
                                     f"extra_overrides[{i}]")


def with_interpreter(command: str, parsed: ParsedCommand, python: str) -> str:
    """``command`` with its ``python3`` replaced by the deployment's interpreter, so the
    expanded spec shows exactly which Python runs the job (it is not a login shell's)."""
    if python == parsed.program.raw:
        return command
    start = parsed.program.offset
    return command[:start] + shlex.quote(python) + command[start + len(parsed.program.raw):]


def _checked(document: str | bytes | Mapping[str, Any], config: TaskSpecConfig,
             parsed: tuple[TaskSpec, list[str]] | None) -> CheckedSpec:
    if parsed is None:
        return check_taskspec(document, config=config)
    spec, warnings = parsed
    values = {name: getattr(spec, name) for name in spec.__struct_fields__}
    return CheckedSpec(kind="basic" if isinstance(spec, BasicTaskSpec) else "advanced", spec=spec, values=values, warnings=list(warnings),
                       problems=Problems())


def _raise(problems: Problems, policy: PathPolicy) -> NoReturn:
    """Every problem; missing files last (a path that is wrong is usually missing too)."""
    problems.items.extend(policy.missing)
    problems.raise_if_any()
    raise AssertionError("_raise called without a problem")  # pragma: no cover


def _duration(field: str, text: str | None) -> float | None:
    """Seconds in a duration field (``argus.taskspec.timelimit``'s forms; None: not set)."""
    if text is None:
        return None
    try:
        return time_limit_seconds(text)
    except ValueError as exc:
        raise TaskSpecError(field, str(exc)) from exc


def _size(field: str, value: str | int | None) -> int | None:
    """Bytes in a size field (``argus.rayjobs.output.parse_bytes``; None: not set)."""
    if value is None:
        return None
    try:
        size = parse_bytes(value)
    except ValueError as exc:
        raise TaskSpecError(field, str(exc)) from exc
    if size < MIN_OUTPUT_BUDGET:
        raise TaskSpecError(field, f"{size} bytes is below the least budget, {MIN_OUTPUT_BUDGET} bytes (64 KiB)")
    return size


def _check_ids(user: str, task_id: str, shared_root: Path) -> None:
    _check_component(user, "user")
    _check_component(task_id, "task_id")
    if not _ROOT_RE.match(str(shared_root)):
        raise TaskSpecError(
            "shared_root", f"{str(shared_root)[:120]!r} must be an absolute path of letters, "
            "digits, '_', '.', '/' and '-' (it is pasted into commands unquoted)",
        )


def _command_as_written(checked: CheckedSpec, policy: PathPolicy, expand: Callable[[str], str],
                        problems: Problems, *, user: str, task_id: str) -> str:
    """The command before expansion: a basic spec's generated one (after its fields'
    checks), an advanced spec's own; raises with every problem when there is none."""
    values = checked.values
    if checked.kind == "basic":
        _check_basic_fields(values, policy, expand, problems)
        policy.require_files = False  # the generated command names the same files again
        if problems or policy.missing or not isinstance(checked.spec, BasicTaskSpec):
            _raise(problems, policy)
        return build_basic_command(checked.spec, user=user, task_id=task_id)
    written = values.get("command")
    if written is None:
        _raise(problems, policy)
    policy.written.update(_written_forms(str(written), expand))
    return str(written)


def _runnable(kind: str, parsed_command: ParsedCommand, python: str) -> str:
    """The command that runs: the deployment's interpreter, and for an advanced verl PPO
    command what the basic builder adds (build_overrides): on Argus's CPU-less head verl's
    TransferQueue storage would be unschedulable and the run would die in TaskRunner.
    Both shown in the expanded command (docs/taskspec.md)."""
    command = with_interpreter(parsed_command.text, parsed_command, python)
    if kind == "advanced" and parsed_command.module == "verl.trainer.main_ppo" and TRANSFER_QUEUE_NODES not in command:
        command = f"{command.rstrip()} ++{TRANSFER_QUEUE_NODES}={WORKER_RESOURCE}"
    return command


def prepare_task(
    document: str | bytes | Mapping[str, Any],
    *,
    user: str,
    task_id: str,
    shared_root: Path,
    config: TaskSpecConfig | None = None,
    parsed: tuple[TaskSpec, list[str]] | None = None,
    require_files: bool = True,
    hub_offline: bool = False,
) -> PreparedTask:
    """Parse, expand, check and build one submitted TaskSpec; raises TaskSpecError with
    every problem found. ``parsed``: the spec and its warnings, when the caller parsed
    ``document`` already. ``require_files``: refuse data, model and reward paths that do
    not exist under the shared root (off only where that root is not this machine's), and
    look each hub id up in the shared model cache: not there, a problem when
    ``hub_offline`` (the cluster cannot reach the hub), else a warning."""
    config = config or TaskSpecConfig()
    _check_ids(user, task_id, shared_root)
    checked = _checked(document, config, parsed)
    problems = Problems(checked.problems.items)
    values = checked.values
    policy = PathPolicy(shared_root=shared_root, user=user, require_files=require_files,
                        hub_offline=hub_offline)

    def expand(text: str) -> str:
        return expand_home(text, user=user, shared_root=policy.root)

    command_raw = _command_as_written(checked, policy, expand, problems, user=user, task_id=task_id)
    # The generated command goes through the same checks: one policy for every command.
    with problems.catch():
        parsed_command, command_warnings = check_command(
            expand(command_raw), policy=policy, nnodes=values.get("nnodes"),
            n_gpus_per_node=values.get("n_gpus_per_node"), workload=values.get("workload"),
            allowed_modules=config.modules(),
        )
    spec = checked.spec
    if problems or policy.missing or spec is None:
        _raise(problems, policy)
    return PreparedTask(
        kind=checked.kind,
        workload=spec.workload,
        spec=encode_taskspec(spec),
        command_raw=command_raw,
        command=_runnable(checked.kind, parsed_command, config.python),
        demand=demand_for(spec.nnodes, spec.n_gpus_per_node, workload=spec.workload, gpu_type=spec.gpu_type),
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        warnings=[*checked.warnings, *command_warnings, *policy.warnings],
        time_limit_s=_duration("time_limit", spec.time_limit),
        stall_timeout_s=_duration("stall_timeout", spec.stall_timeout),
        preemptible=spec.preemptible,
        output_budget_bytes=_size("output_budget", spec.output_budget),
    )
