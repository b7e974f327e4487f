"""TaskSpec parsing and checking: one ``parse_taskspec`` for both kinds (docs/design.md §6); the
models themselves are in :mod:`argus.taskspec.models` (re-exported here).

A document without ``kind`` is a basic spec (the seeds' v2.0/v3.0 YAML, Argus builds the
verl command); ``kind: advanced`` carries the user's own command. Parsing checks structure,
types, ranges and sizes only; path policy and command checks need the user and the shared
root and live in :func:`argus.taskspec.prepare.prepare_task`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import msgspec

from argus.config import TaskSpecConfig
# _C_UNSAFE_RE, _NoAliasLoader: re-exported for the tests of the YAML fast path.
from argus.taskspec.document import _C_UNSAFE_RE, _NoAliasLoader, load_document  # noqa: F401
from argus.taskspec.errors import Problems, TaskSpecError
from argus.taskspec.fields import convert_fields, split_known
from argus.taskspec.models import (
    MAX_GPUS_PER_NODE,
    MAX_NNODES,
    MAX_OVERRIDES,
    RL_ONLY_FIELDS,
    WORKLOADS,
    AdvancedTaskSpec,
    BasicTaskSpec,
    TaskSpec,
    encode_taskspec,
)
from argus.taskspec.timelimit import TIME_LIMIT_ACCEPTS

__all__ = [
    "AdvancedTaskSpec",
    "BasicTaskSpec",
    "CheckedSpec",
    "PLATFORM_KEYS",
    "TaskSpec",
    "WORKLOADS",
    "check_taskspec",
    "encode_taskspec",
    "parse_taskspec",
    "parse_taskspec_with_warnings",
]

MAX_GPU_TYPES = 8
_GPU_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")

# Keys Argus sets itself: the gang it reserves and the server-computed output directory.
# Overriding them would make verl ask for other resources than were admitted, or write
# outside the job directory.
PLATFORM_KEYS: frozenset[str] = frozenset(
    {"trainer.nnodes", "trainer.n_gpus_per_node", "trainer.default_local_dir"}
)

# Hydra override grammar we accept: optional +, ++ or ~, a dotted key (with Hydra's
# group@package and group/option forms), '=', any value. '~key' may stand alone.
_OVERRIDE_RE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/-]*)(?P<eq>=)?")


# What each field accepts, appended to type errors so the user knows what to write.
_ACCEPTS: dict[str, str] = {
    "name": "one line of text, at most 80 characters",
    "kind": "omit it or 'basic' (basic spec), or 'advanced'",
    "workload": "one of " + ", ".join(WORKLOADS),
    "nnodes": f"an integer from 1 to {MAX_NNODES}",
    "n_gpus_per_node": f"an integer from 1 to {MAX_GPUS_PER_NODE}",
    "model_id": "a hub id like Qwen/Qwen2.5-0.5B-Instruct or a path under $HOME/models/ "
    "or $HOME/common/hf/",
    "train_file": "a parquet path under $HOME/datasets/ or $HOME/common/datasets/",
    "val_file": "a parquet path under $HOME/datasets/ or $HOME/common/datasets/, or null",
    "total_training_steps": "a positive integer or null",
    "save_freq": "-1 (never) or a positive integer",
    "test_freq": "-1 (never) or a positive integer",
    "learning_rate": "a positive finite number such as 1.0e-6, or null",
    "rollout_engine": "vllm, sglang or null",
    "extra_overrides": "a list of Hydra overrides such as "
    "'actor_rollout_ref.rollout.temperature=0.7'",
    "priority": "an integer from -1000000 to 1000000 (higher runs first)",
    "max_attempts": "an integer from 1 to 100",
    "time_limit": TIME_LIMIT_ACCEPTS,
    "stall_timeout": TIME_LIMIT_ACCEPTS,
    "output_budget": "a size (512MiB, 2GiB, or bytes), at least 64 KiB, within the admin's v2.output.max_budget_bytes",
    "gpu_type": f"a GPU model as the nodes are labelled, such as H100 (letters, digits, '.', '_', '-'), "
    f"a list of up to {MAX_GPU_TYPES} such names, or null (any model)",
    "preemptible": "true or false (false: never stopped to make room for other work)",
    "retry_on": "a list of failure kinds the admin allows (v2.taskspec.retry_on_kinds) and exit codes from 1 to 255, "
    "such as [RUNTIME_ERROR, 137]",
    "command": "a non-empty string: NAME=value assignments, then python3 -m <module> args",
}
_DEFAULT_ACCEPTS = "a positive integer"

# Keys from older clients (v2.0/v3.0 JobSpec) that Argus now computes itself.
_IGNORED_KEYS: dict[str, str] = {
    "submission_id": "the submission id is computed by the server",
    "code_path": "custom verl code paths are not supported; the platform's verl is used",
    "user_id": "the user comes from the API token",
    "user": "the user comes from the API token",
}

# Basic fields an advanced spec writes as verl overrides in its command instead.
_IN_COMMAND: dict[str, str] = {
    "train_file": "data.train_files=",
    "val_file": "data.val_files=",
    "model_id": "actor_rollout_ref.model.path=",
}


class CheckedSpec(NamedTuple):
    """What :func:`check_taskspec` found: the spec when there is no problem, else the
    fields that passed their own checks (so later checks can still look at them)."""

    kind: Literal["basic", "advanced"]
    spec: TaskSpec | None
    values: dict[str, Any]  # every field that passed its own checks, defaults included
    warnings: list[str]
    problems: Problems


def _accepts(name: str) -> str:
    return _ACCEPTS.get(name, _DEFAULT_ACCEPTS)


def check_override_syntax(override: str, field: str) -> tuple[str, str, str | None]:
    """Split a Hydra override into (prefix, key, value); reject malformed ones and keys
    Argus owns. ``value`` is None for a bare ``~key`` deletion."""
    match = _OVERRIDE_RE.match(override)
    if match is None or (match.group("eq") is None and match.end() != len(override)):
        raise TaskSpecError(
            field,
            f"{override[:120]!r} is not a Hydra override; write key=value, "
            "+key=value, ++key=value or ~key (keys are letters, digits, _ . @ / -)",
        )
    prefix, key = match.group("prefix") or "", match.group("key")
    if match.group("eq") is None and prefix != "~":
        raise TaskSpecError(field, f"{override[:120]!r} has no '='; write {key}=<value>")
    if key in PLATFORM_KEYS:
        raise TaskSpecError(
            field,
            f"{key} is set by Argus (from nnodes/n_gpus_per_node and the job directory); "
            "remove this override and use the spec fields instead",
        )
    value = override[match.end():] if match.group("eq") else None
    return prefix, key, value

def _check_basic(v: Mapping[str, Any], problems: Problems) -> list[str]:
    """Checks across fields of a basic spec; each runs only if its fields passed their own."""
    warnings: list[str] = []
    lr = v.get("learning_rate")
    if lr is not None and (not math.isfinite(lr) or lr <= 0 or lr > 1):
        problems.add(
            "learning_rate", f"{lr!r} is out of range; accepted: {_ACCEPTS['learning_rate']} "
            "(at most 1)"
        )
    for name in ("save_freq", "test_freq"):
        if v.get(name) == 0:
            # verl computes step % freq; 0 would divide by zero mid-run.
            problems.add(name, f"0 is not allowed; accepted: {_ACCEPTS[name]}")
    overrides = v.get("extra_overrides", ())
    if len(overrides) > MAX_OVERRIDES:
        problems.add("extra_overrides", f"has {len(overrides)} entries; at most {MAX_OVERRIDES}")
        overrides = ()
    for i, override in enumerate(overrides):
        if "\x00" in override or "\n" in override or "\r" in override:
            problems.add(f"extra_overrides[{i}]", "must be one line without NUL bytes")
            continue
        with problems.catch():
            _prefix, key, value = check_override_syntax(override, f"extra_overrides[{i}]")
            if key == "trainer.logger" and value is not None and "file" not in value:
                warnings.append(
                    f"extra_overrides[{i}]: trainer.logger without 'file'; Argus shows training "
                    "progress from verl's file logger, add file to the list to keep it"
                )
    workload = v.get("workload")
    if workload == "sft":
        for name in RL_ONLY_FIELDS:
            if v.get(name) is not None:
                warnings.append(f"{name}: ignored for workload sft (it applies to ppo and grpo)")
    elif workload is not None:
        if "val_file" in v and v["val_file"] is None:
            warnings.append("val_file: not set; validation will use train_file")
        rollout_n = v.get("rollout_n")
        if workload == "grpo" and rollout_n is not None and rollout_n < 2:
            problems.add(
                "rollout_n", f"{rollout_n} is too small for grpo, which compares a group of "
                "responses per prompt; accepted: 2 or more (default 5)"
            )
        mini, batch = v.get("ppo_mini_batch_size"), v.get("train_batch_size")
        if mini is not None and batch is not None and mini > batch:
            problems.add(
                "ppo_mini_batch_size",
                f"{mini} is larger than train_batch_size {batch}; "
                "accepted: at most train_batch_size",
            )
    return warnings


_MODULE_IN_COMMAND_RE = re.compile(r"-m\s+([A-Za-z_][A-Za-z0-9_.]*)")
_GRPO_RE = re.compile(r"algorithm\.adv_estimator=['\"]?grpo(?![A-Za-z0-9_])")


def _infer_workload(command: Any) -> str | None:
    """The seed's own advanced example has no ``workload``; read it off the command: an SFT
    module is sft, ``algorithm.adv_estimator=grpo`` is grpo, other verl PPO is ppo."""
    if not isinstance(command, str):
        return None
    match = _MODULE_IN_COMMAND_RE.search(command)
    if match is None:
        return None
    module = match.group(1)
    if "sft" in module.rsplit(".", 1)[-1]:
        return "sft"
    if module == "verl.trainer.main_ppo":
        return "grpo" if _GRPO_RE.search(command) else "ppo"
    return None

def _spec_class(data: dict[str, Any]) -> type[msgspec.Struct]:
    """The spec class a document's ``kind`` names (raises when no field can be checked)."""
    kind = data.get("kind")
    if kind is None or kind == "basic":
        if "command" in data:
            raise TaskSpecError(
                "kind", "a spec with a 'command' must say 'kind: advanced'; a basic spec "
                "has model_id/train_file instead of a command"
            )
        return BasicTaskSpec
    if kind == "advanced":
        return AdvancedTaskSpec
    raise TaskSpecError("kind", f"{str(kind)[:80]!r} is unknown; accepted: {_ACCEPTS['kind']}")


def _workload_of_command(known: dict[str, Any], warnings: list[str], misspelt: set[str],
                         problems: Problems) -> None:
    """An advanced spec without ``workload``: read it off the command, or say it is needed."""
    inferred = _infer_workload(known.get("command"))
    if inferred is None:
        known.pop("workload", None)
        if "workload" not in misspelt:
            problems.add(
                "workload", "is required when it cannot be read off the command "
                f"(a verl.trainer.main_ppo or *sft* module); accepted: {_ACCEPTS['workload']}"
            )
        misspelt.add("workload")  # reported just above, or as the misspelt key
    else:
        known["workload"] = inferred
        warnings.append(f"workload: not set; {inferred} inferred from the command")


def _check_command_size(values: dict[str, Any], config: TaskSpecConfig, problems: Problems) -> None:
    command = values.get("command")
    if command is None:
        return
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > config.max_command_bytes:
        problems.add("command", f"is {size} bytes; the limit is {config.max_command_bytes} bytes")
        del values["command"]
    elif not command.strip():
        problems.add("command", "is empty; accepted: " + _ACCEPTS["command"])
        del values["command"]


def _check_common(values: dict[str, Any], config: TaskSpecConfig, problems: Problems) -> None:
    """The fields both kinds have that need more than a type: ``gpu_type``, ``retry_on``."""
    problem = _gpu_type_problem(values.get("gpu_type"))
    if problem is not None:
        problems.add("gpu_type", f"{problem}; accepted: {_ACCEPTS['gpu_type']}")
        del values["gpu_type"]
    problem = _retry_on_problem(values.get("retry_on"), config.retry_on_kinds)
    if problem is not None:
        problems.add("retry_on", f"{problem}; accepted: {_ACCEPTS['retry_on']}")
        del values["retry_on"]


def check_taskspec(
    document: str | bytes | Mapping[str, Any], *, config: TaskSpecConfig | None = None
) -> CheckedSpec:
    """Check a document and collect every problem found, without raising for them
    (only a document that cannot be read as a mapping, or whose kind is unclear, raises
    TaskSpecError at once: no field can be checked then)."""
    config = config or TaskSpecConfig()
    data = load_document(document, config)
    cls = _spec_class(data)
    data = {k: v for k, v in data.items() if not (cls is BasicTaskSpec and k == "kind")}
    problems = Problems()
    names = tuple(cls.__struct_fields__)
    advanced = cls is AdvancedTaskSpec
    elsewhere = {  # basic fields in an advanced spec: say where they go instead
        name: "is a field of basic specs; an advanced spec writes "
        + (f"{_IN_COMMAND[name]}... in its command" if name in _IN_COMMAND
           else "the matching verl override in its command")
        for name in BasicTaskSpec.__struct_fields__ if advanced and name not in names
    }
    # misspelt: the fields a misspelt key stands for; reported once, as that key.
    known, warnings, misspelt = split_known(
        data, names, "an advanced" if advanced else "a basic",
        ignored=_IGNORED_KEYS, elsewhere=elsewhere, problems=problems,
    )
    if advanced and known.get("workload") is None:
        _workload_of_command(known, warnings, misspelt, problems)
    spec, values = convert_fields(known, cls, problems, accepts=_accepts, skip_missing=misspelt)
    if advanced:
        _check_command_size(values, config, problems)
    else:
        warnings.extend(_check_basic(values, problems))
    _check_common(values, config, problems)
    return CheckedSpec(
        kind="advanced" if advanced else "basic",
        spec=None if problems else spec, values=values, warnings=warnings, problems=problems,
    )


def _gpu_type_problem(value: str | tuple[str, ...] | None) -> str | None:
    """What is wrong with a spec's ``gpu_type``, or None."""
    names = (value,) if isinstance(value, str) else value or ()
    if isinstance(value, tuple) and not (1 <= len(value) <= MAX_GPU_TYPES):
        return f"a list of {len(value)} models"
    for name in names:
        if not _GPU_TYPE_RE.match(name):
            return f"{name[:60]!r} is not a GPU model name"
    return None


MAX_RETRY_ON = 16


def _retry_on_problem(value: object, allowed: list[str]) -> str | None:
    """What is wrong with a spec's ``retry_on``, or None. Booleans are refused: YAML's
    ``yes`` is True, which Python would also take for the exit code 1."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        return f"{str(value)[:60]!r} is not a list"
    if len(items) > MAX_RETRY_ON:
        return f"a list of {len(items)} entries (at most {MAX_RETRY_ON})"
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            return f"{str(item)[:60]!r} is neither a failure kind nor an exit code"
        if isinstance(item, int) and not 1 <= item <= 255:
            return f"exit code {item} is not from 1 to 255"
        if isinstance(item, str) and item not in allowed:
            return (f"{item[:60]!r} is not a failure kind the admin lets specs retry on "
                    f"({', '.join(allowed) or 'none'})")
    return None


def parse_taskspec_with_warnings(
    document: str | bytes | Mapping[str, Any], *, config: TaskSpecConfig | None = None
) -> tuple[TaskSpec, list[str]]:
    """Like :func:`parse_taskspec`, also returning the soft warnings (legacy keys, fields
    that do not apply to the workload)."""
    checked = check_taskspec(document, config=config)
    checked.problems.raise_if_any()
    assert checked.spec is not None  # no problem: the struct converted
    return checked.spec, checked.warnings


def parse_taskspec(
    document: str | bytes | Mapping[str, Any], *, config: TaskSpecConfig | None = None
) -> TaskSpec:
    """Parse a YAML/JSON document (text or an already-parsed mapping) into a TaskSpec.

    No ``kind`` gives a :class:`BasicTaskSpec`, ``kind: advanced`` an
    :class:`AdvancedTaskSpec`. Raises only :class:`TaskSpecError`.
    """
    return parse_taskspec_with_warnings(document, config=config)[0]
