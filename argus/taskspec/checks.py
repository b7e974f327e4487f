"""The checks of an expanded command (no arbitrary system commands, paths in the user's area): hard ones raise (every problem
found, together), soft ones return warnings that are shown to the user and kept on the task."""

from __future__ import annotations

import re

from argus.confine.envpolicy import override_env_problem
from argus.taskspec.command import ParsedCommand, parse_command, split_command, split_override
from argus.taskspec.errors import Problems, TaskSpecError
from argus.taskspec.hub import HUB_ID_RE
from argus.taskspec.paths import PathPolicy
from argus.taskspec.script import read_script

__all__ = ["DATA_KEYS", "check_command", "hub_ids", "is_model_key", "is_reward_key", "split_list"]

DATA_KEYS = frozenset({"data.train_files", "data.val_files"})
_MODEL_KEY_RE = re.compile(
    r"(?:^|\.)model\.(?:path|tokenizer_path|hf_config_path|lora_adapter_path)$"
)
_NULLS = frozenset({"", "null", "None", "~"})
_RAY_ADDRESS_KEY = "ray_kwargs.ray_init.address"


def is_model_key(key: str) -> bool:
    """``actor_rollout_ref.model.path``, ``critic.model.path``, SFT's ``model.path``..."""
    return bool(_MODEL_KEY_RE.search(key))


def is_reward_key(key: str) -> bool:
    """``custom_reward_function.path`` wherever verl nests it."""
    return key == "custom_reward_function.path" or key.endswith(".custom_reward_function.path")


def split_list(value: str) -> list[str]:
    """The items of a Hydra value: ``[a,b]``, ``a,b`` or ``a``, quotes stripped."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    items = [item.strip().strip("'\"").strip() for item in value.split(",")]
    return [item for item in items if item not in _NULLS]


def hub_ids(command: str) -> list[str]:
    """The hub ids an (expanded) command names as models (``actor_rollout_ref.model.path=
    Qwen/...``), each once, in order (a pasted script: those of its one command). A
    command that does not split names none."""
    try:
        words = split_command(read_script(command).command)
    except TaskSpecError:  # refused at submit; here only what can be read
        return []
    found: dict[str, None] = {}
    for word in words:
        parts = split_override(word.value)
        if parts is None or not is_model_key(parts[1]):
            continue
        for item in split_list(parts[2] or ""):
            if not item.startswith("/") and HUB_ID_RE.match(item) and ".." not in item:
                found.setdefault(item, None)
    return list(found)


def check_override_paths(key: str, value: str, policy: PathPolicy, field: str) -> None:
    """Apply the allow-list that ``key`` calls for, then the rule for every path."""
    if key in DATA_KEYS:
        for item in split_list(value):
            policy.check_data(item, field)
    elif is_reward_key(key):
        for item in split_list(value):
            policy.check_reward(item, field)
    elif is_model_key(key):
        for item in split_list(value):
            policy.check_model(item, field)
    policy.check_any(value, field)


def _check_gang(key: str, value: str, expected: int, spec_field: str) -> None:
    try:
        given = int(value.strip().strip("'\""))
    except ValueError:
        given = None
    if given != expected:
        raise TaskSpecError(
            f"command[{key}]",
            f"{key}={value[:40]} disagrees with the spec's {spec_field}: {expected}; Argus "
            f"reserves {spec_field} from the spec, so write {key}={expected} "
            f"(or change {spec_field})",
        )


def _check_words(parsed: ParsedCommand, policy: PathPolicy, nnodes: int | None,
                 n_gpus_per_node: int | None) -> tuple[Problems, set[str]]:
    """Each word of an accepted command on its own: its problems, and the override keys
    it sets."""
    problems = Problems()
    for name, value in parsed.assignments:
        with problems.catch():
            policy.check_any(value, f"command[{name}]")
    seen: set[str] = set()
    for arg in parsed.args:
        override = split_override(arg)
        if override is None:
            with problems.catch():
                policy.check_any(arg, f"command[{arg[:60]}]")
            continue
        _prefix, key, given = override
        seen.add(key)
        if given is None:
            continue
        field = f"command[{key}]"
        env = override_env_problem(key, given)
        if env is not None:
            problems.add(field, f"{env}; remove the override (only the allowed module may run)")
        with problems.catch():
            check_override_paths(key, given, policy, field)
        with problems.catch():
            if key == "trainer.nnodes" and nnodes is not None:
                _check_gang(key, given, nnodes, "nnodes")
            elif key == "trainer.n_gpus_per_node" and n_gpus_per_node is not None:
                _check_gang(key, given, n_gpus_per_node, "n_gpus_per_node")
    return problems, seen


def _soft_warnings(parsed: ParsedCommand, seen: set[str], nnodes: int | None, n_gpus_per_node: int | None,
                   workload: str | None) -> list[str]:
    """What is accepted but likely not meant (docs/taskspec.md, "Soft")."""
    warnings: list[str] = list(parsed.notes)
    if "data.train_files" not in seen:
        warnings.append(
            "command: no data.train_files= found; if the data comes from a config file, "
            "Argus could not check its path"
        )
    if parsed.module == "verl.trainer.main_ppo" and _RAY_ADDRESS_KEY not in seen:
        warnings.append(
            "command: no +ray_kwargs.ray_init.address=auto; recommended so that verl joins "
            "the cluster the job runs on"
        )
    if parsed.module.startswith("verl.trainer."):
        for key, spec_field, reserved in (
            ("trainer.nnodes", "nnodes", nnodes),
            ("trainer.n_gpus_per_node", "n_gpus_per_node", n_gpus_per_node),
        ):
            if key not in seen and reserved is not None:
                warnings.append(
                    f"command: no {key}=; verl will use its default while Argus reserves "
                    f"{spec_field}={reserved}; add {key}={reserved}"
                )
    is_sft_module = "sft" in parsed.module.rsplit(".", 1)[-1]
    if parsed.module == "verl.trainer.main_ppo" and workload == "sft":
        warnings.append("workload: sft, but the command runs verl.trainer.main_ppo (ppo/grpo)")
    elif is_sft_module and workload in ("ppo", "grpo"):
        warnings.append(f"workload: {workload}, but the command runs {parsed.module} (sft)")
    return warnings


def check_command(
    command: str,
    *,
    policy: PathPolicy,
    nnodes: int | None,
    n_gpus_per_node: int | None,
    workload: str | None,
    allowed_modules: list[str],
) -> tuple[ParsedCommand, list[str]]:
    """Check an expanded command; return its parts and the soft warnings. The shape of the
    command is checked first (nothing else can be read from a malformed one); then each
    word on its own, and all their problems are raised together. ``None`` for a spec
    field that is itself invalid skips the checks against it."""
    parsed = parse_command(command, allowed_modules=allowed_modules)
    problems, seen = _check_words(parsed, policy, nnodes, n_gpus_per_node)
    if not problems:
        # The backstop over the whole text; after a word's own problem it would only
        # repeat that problem.
        with problems.catch():
            policy.scan_text(parsed.text, "command")
    problems.raise_if_any()
    return parsed, _soft_warnings(parsed, seen, nnodes, n_gpus_per_node, workload)
