"""TaskSpec models and parsing: one ``parse_taskspec`` for both kinds (DESIGN.md §6).

A document without ``kind`` is a basic spec (the seeds' v2.0/v3.0 YAML, Argus builds the
verl command); ``kind: advanced`` carries the user's own command. Parsing checks structure,
types, ranges and sizes only; path policy and command checks need the user and the shared
root and live in :func:`argus.taskspec.prepare.prepare_task`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

import msgspec
import yaml

from argus.config import TaskSpecConfig
from argus.taskspec.errors import TaskSpecError

__all__ = [
    "AdvancedTaskSpec",
    "BasicTaskSpec",
    "PLATFORM_KEYS",
    "TaskSpec",
    "WORKLOADS",
    "encode_taskspec",
    "parse_taskspec",
    "parse_taskspec_with_warnings",
]

WORKLOADS: tuple[str, ...] = ("ppo", "grpo", "sft")
Workload: TypeAlias = Literal["ppo", "grpo", "sft"]

MAX_NNODES = 1024
MAX_GPUS_PER_NODE = 64
MAX_PATH_CHARS = 4096
MAX_OVERRIDES = 256

NNodes = Annotated[int, msgspec.Meta(ge=1, le=MAX_NNODES)]
GpusPerNode = Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS_PER_NODE)]
PathText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATH_CHARS)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=10_000_000)]
Freq = Annotated[int, msgspec.Meta(ge=-1, le=10_000_000)]
Priority = Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)]
Attempts = Annotated[int, msgspec.Meta(ge=1, le=100)]
Override = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATH_CHARS)]

# Keys Argus sets itself: the gang it reserves and the server-computed output directory.
# Overriding them would make verl ask for other resources than were admitted, or write
# outside the job directory.
PLATFORM_KEYS: frozenset[str] = frozenset(
    {"trainer.nnodes", "trainer.n_gpus_per_node", "trainer.default_local_dir"}
)

# Hydra override grammar we accept: optional +, ++ or ~, a dotted key (with Hydra's
# group@package and group/option forms), '=', any value. '~key' may stand alone.
_OVERRIDE_RE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/-]*)(?P<eq>=)?")


class BasicTaskSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A structured task: Argus builds the verl command (see ``builders``).

    ``None`` for a tunable means "the workload's default" (docs/taskspec.md has the table).
    """

    workload: Workload
    nnodes: NNodes
    n_gpus_per_node: GpusPerNode
    model_id: PathText
    train_file: PathText
    val_file: PathText | None = None
    total_epochs: Positive = 1
    total_training_steps: Positive | None = None
    train_batch_size: Positive = 256
    micro_batch_size_per_gpu: Positive = 4
    learning_rate: float | None = None
    save_freq: Freq = 10
    test_freq: Freq = 10
    # RL-only tunables (ppo, grpo); setting them for sft gives a warning.
    ppo_mini_batch_size: Positive | None = None
    max_prompt_length: Positive | None = None
    max_response_length: Positive | None = None
    rollout_engine: Literal["vllm", "sglang"] | None = None
    rollout_n: Positive | None = None
    rollout_tp: Positive | None = None
    extra_overrides: tuple[Override, ...] = ()
    priority: Priority = 0
    max_attempts: Attempts = 3


class AdvancedTaskSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The user's own command (``kind: advanced``), run with ``bash -lc`` after ``$HOME``
    expansion and the checks of seed 000 §2.4."""

    kind: Literal["advanced"] = "advanced"
    workload: Workload
    nnodes: NNodes
    n_gpus_per_node: GpusPerNode
    command: Annotated[str, msgspec.Meta(min_length=1)]
    priority: Priority = 0
    max_attempts: Attempts = 3


TaskSpec: TypeAlias = BasicTaskSpec | AdvancedTaskSpec

RL_ONLY_FIELDS: tuple[str, ...] = (
    "ppo_mini_batch_size",
    "max_prompt_length",
    "max_response_length",
    "rollout_engine",
    "rollout_n",
    "rollout_tp",
)

# What each field accepts, appended to type errors so the user knows what to write.
_ACCEPTS: dict[str, str] = {
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


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases: an alias bomb is tiny as text but huge once
    walked, and no TaskSpec needs them."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a TaskSpec", event.start_mark
            )
        return super().compose_node(parent, index)


_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)  # None without libyaml
# Texts libyaml may read differently from _NoAliasLoader go to the pure-Python loader:
# '*' (an alias: libyaml cannot be told to refuse them), '!' (tags; a bare '!' is '' in
# libyaml, None in PyYAML), tabs, BOM and Unicode line breaks, and '|#' / '>-#' (libyaml
# accepts them). What remains reads the same in both (differential fuzzing); libyaml
# does it at a fraction of the CPU, and its errors are re-worded by the pure-Python one.
_C_UNSAFE_RE = re.compile("[!*\t\ufeff\x85\u2028\u2029]|[|>][-+0-9]*#")


def _load_text(text: str) -> Any:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return msgspec.json.decode(stripped)
        except msgspec.DecodeError:
            pass  # not strict JSON; YAML flow syntax is a superset, try that
    if _CSafeLoader is not None and _C_UNSAFE_RE.search(text) is None:
        try:
            return yaml.load(text, Loader=_CSafeLoader)  # noqa: S506 - safe loader
        except Exception:  # noqa: BLE001, S110 - the pure-Python loader words the error
            pass
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - SafeLoader subclass
    except Exception as exc:  # yaml raises YAMLError, ValueError (bad dates), RecursionError...
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TaskSpecError("document", f"not valid YAML or JSON ({detail[:200]})") from None


def _load(document: str | bytes | Mapping[str, Any], config: TaskSpecConfig) -> dict[Any, Any]:
    limit = config.max_document_bytes
    if isinstance(document, Mapping):
        data: Any = dict(document)
        try:
            # The size of the mapping as a client would have sent it.
            size = len(msgspec.json.encode(data))
        except (TypeError, ValueError, OverflowError, RecursionError):
            raise TaskSpecError(
                "document", "values must be JSON-compatible (strings, numbers, lists, maps)"
            ) from None
    elif isinstance(document, (str, bytes)):
        raw = document.encode("utf-8", "surrogatepass") if isinstance(document, str) else document
        size = len(raw)
        if size > limit:
            raise TaskSpecError("document", f"is {size} bytes; the limit is {limit} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TaskSpecError("document", "is not UTF-8 text") from None
        if "\x00" in text:
            raise TaskSpecError("document", "contains a NUL byte; send plain YAML or JSON text")
        data = _load_text(text)
    else:
        raise TaskSpecError("document", "must be YAML/JSON text or a mapping")
    if size > limit:
        raise TaskSpecError("document", f"is {size} bytes; the limit is {limit} bytes")
    if not isinstance(data, dict):
        raise TaskSpecError(
            "document", f"must be a mapping of fields at the top level, got {type(data).__name__}"
        )
    return data


def _field_from_validation(exc: msgspec.ValidationError) -> tuple[str, str]:
    text = str(exc)
    missing = re.search(r"missing required field `([^`]+)`", text)
    if missing:
        return missing.group(1), "is required"
    at = re.search(r" - at `\$\.?([^`]*)`$", text)
    field = at.group(1) if at else "document"
    message = text[: at.start()] if at else text
    return field or "document", message


def _convert(data: dict[str, Any], cls: type[msgspec.Struct]) -> Any:
    try:
        # strict=False: YAML 1.1 reads 1e-6 as a string; lax mode turns it into a float.
        return msgspec.convert(data, cls, strict=False)
    except msgspec.ValidationError as exc:
        field, message = _field_from_validation(exc)
        base = re.sub(r"\[\d+\]$", "", field)
        accepts = _ACCEPTS.get(base, _DEFAULT_ACCEPTS)
        raise TaskSpecError(field, f"{message}; accepted: {accepts}") from None


def _split_known(
    data: dict[Any, Any], cls: type[msgspec.Struct]
) -> tuple[dict[str, Any], list[str]]:
    known_names = set(cls.__struct_fields__)
    known: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in data.items():
        if isinstance(key, str) and key in known_names:
            known[key] = value
            continue
        shown = repr(key)[:80]
        if isinstance(key, str) and key in _IGNORED_KEYS:
            warnings.append(f"{shown}: ignored, {_IGNORED_KEYS[key]}")
        else:
            warnings.append(
                f"{shown}: unknown key, ignored; known keys: {', '.join(sorted(known_names))}"
            )
    return known, warnings


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


def _check_basic(spec: BasicTaskSpec) -> list[str]:
    warnings: list[str] = []
    lr = spec.learning_rate
    if lr is not None and (not math.isfinite(lr) or lr <= 0 or lr > 1):
        raise TaskSpecError(
            "learning_rate", f"{lr!r} is out of range; accepted: {_ACCEPTS['learning_rate']} "
            "(at most 1)"
        )
    for name in ("save_freq", "test_freq"):
        if getattr(spec, name) == 0:
            # verl computes step % freq; 0 would divide by zero mid-run.
            raise TaskSpecError(name, f"0 is not allowed; accepted: {_ACCEPTS[name]}")
    if len(spec.extra_overrides) > MAX_OVERRIDES:
        count = len(spec.extra_overrides)
        raise TaskSpecError("extra_overrides", f"has {count} entries; at most {MAX_OVERRIDES}")
    for i, override in enumerate(spec.extra_overrides):
        if "\x00" in override or "\n" in override or "\r" in override:
            raise TaskSpecError(f"extra_overrides[{i}]", "must be one line without NUL bytes")
        _prefix, key, value = check_override_syntax(override, f"extra_overrides[{i}]")
        if key == "trainer.logger" and value is not None and "file" not in value:
            warnings.append(
                f"extra_overrides[{i}]: trainer.logger without 'file'; Argus shows training "
                "progress from verl's file logger, add file to the list to keep it"
            )
    if spec.workload == "sft":
        for name in RL_ONLY_FIELDS:
            if getattr(spec, name) is not None:
                warnings.append(f"{name}: ignored for workload sft (it applies to ppo and grpo)")
    else:
        if spec.val_file is None:
            warnings.append("val_file: not set; validation will use train_file")
        if spec.workload == "grpo" and spec.rollout_n is not None and spec.rollout_n < 2:
            raise TaskSpecError(
                "rollout_n", f"{spec.rollout_n} is too small for grpo, which compares a group of "
                "responses per prompt; accepted: 2 or more (default 5)"
            )
        mini = spec.ppo_mini_batch_size
        if mini is not None and mini > spec.train_batch_size:
            raise TaskSpecError(
                "ppo_mini_batch_size",
                f"{mini} is larger than train_batch_size {spec.train_batch_size}; "
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


def parse_taskspec_with_warnings(
    document: str | bytes | Mapping[str, Any], *, config: TaskSpecConfig | None = None
) -> tuple[TaskSpec, list[str]]:
    """Like :func:`parse_taskspec`, also returning the soft warnings (unknown keys, fields
    that do not apply to the workload)."""
    config = config or TaskSpecConfig()
    data = _load(document, config)
    kind = data.get("kind")
    cls: type[msgspec.Struct]
    if kind is None or kind == "basic":
        if "command" in data:
            raise TaskSpecError(
                "kind", "a spec with a 'command' must say 'kind: advanced'; a basic spec "
                "has model_id/train_file instead of a command"
            )
        cls = BasicTaskSpec
    elif kind == "advanced":
        cls = AdvancedTaskSpec
    else:
        raise TaskSpecError("kind", f"{str(kind)[:80]!r} is unknown; accepted: {_ACCEPTS['kind']}")
    data = {k: v for k, v in data.items() if not (cls is BasicTaskSpec and k == "kind")}
    known, warnings = _split_known(data, cls)
    if cls is AdvancedTaskSpec and known.get("workload") is None:
        inferred = _infer_workload(known.get("command"))
        if inferred is None:
            raise TaskSpecError(
                "workload", "is required when it cannot be read off the command "
                f"(a verl.trainer.main_ppo or *sft* module); accepted: {_ACCEPTS['workload']}"
            )
        known["workload"] = inferred
        warnings.append(f"workload: not set; {inferred} inferred from the command")
    spec = _convert(known, cls)
    if isinstance(spec, AdvancedTaskSpec):
        size = len(spec.command.encode("utf-8", "surrogatepass"))
        if size > config.max_command_bytes:
            raise TaskSpecError(
                "command", f"is {size} bytes; the limit is {config.max_command_bytes} bytes"
            )
        if not spec.command.strip():
            raise TaskSpecError("command", "is empty; accepted: " + _ACCEPTS["command"])
    else:
        warnings.extend(_check_basic(spec))
    return spec, warnings


def parse_taskspec(
    document: str | bytes | Mapping[str, Any], *, config: TaskSpecConfig | None = None
) -> TaskSpec:
    """Parse a YAML/JSON document (text or an already-parsed mapping) into a TaskSpec.

    No ``kind`` gives a :class:`BasicTaskSpec`, ``kind: advanced`` an
    :class:`AdvancedTaskSpec`. Raises only :class:`TaskSpecError`.
    """
    return parse_taskspec_with_warnings(document, config=config)[0]


def encode_taskspec(spec: TaskSpec) -> dict[str, Any]:
    """The spec as builtins (JSON-ready); ``parse_taskspec(encode_taskspec(s)) == s``."""
    # Through JSON rather than to_builtins: tuples become lists, so the result is exactly
    # what a JSON client would send back.
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(spec))
    return out
