"""The TaskSpec models: the fields of a basic and of an advanced spec, their types and
limits, as msgspec Structs. Checking a document against them, and the messages that say
what each field accepts, are in :mod:`argus.taskspec.spec`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import msgspec

from argus.taskspec.timelimit import TimeLimit

__all__ = [
    "AdvancedTaskSpec", "BasicTaskSpec", "MAX_GPUS_PER_NODE", "MAX_NNODES", "MAX_OVERRIDES", "RL_ONLY_FIELDS", "TaskSpec",
    "WORKLOADS", "encode_taskspec",
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
# One line of printable text: it is shown in tables and the WebUI.
TaskName = Annotated[str, msgspec.Meta(max_length=80, pattern=r"^[^\x00-\x1f\x7f]*$")]


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
    name: TaskName = ""  # a label for people, shown beside the task id
    time_limit: TimeLimit | None = None  # per attempt, from when it runs (argus.taskspec.timelimit)
    # No new training step for this long: stalled, stopped and resumed (docs/runs.md);
    # None: as the admin set it (v2.scheduler.stall), from the run's own step times.
    stall_timeout: TimeLimit | None = None
    # May be stopped to make room for a higher-priority task, or for a user under its fair
    # share; it goes back to its place in the queue and resumes from its checkpoints.
    # None (not said): as the user may have it (argus.service.limits.resolve_preemptible).
    preemptible: bool | None = None
    # The GPU model(s) the gang accepts, as the nodes are labelled (Ray's accelerator_type:
    # resource): one name, or a list of acceptable ones; None: any node's GPUs.
    # (Checked by argus.taskspec.spec._gpu_type_problem, not by constraints here: msgspec 0.22 crashed in its
    # garbage collection after a constrained array inside a union failed to convert.)
    gpu_type: str | tuple[str, ...] | None = None
    # Failure kinds and exit codes to retry on beyond Argus's own rule, e.g. [RUNTIME_ERROR,
    # 137]: a kind among those the admin allows (v2.taskspec.retry_on_kinds), an exit code
    # 1-255; at most v2.scheduler.retry_on_max such retries per task (docs/taskspec.md).
    # (Checked by argus.taskspec.spec._retry_on_problem, for the same reason as gpu_type.)
    retry_on: tuple[str | int, ...] = ()
    # How much of each attempt's output is kept (512MiB, 2GiB, or bytes), within the admin's
    # v2.output.max_budget_bytes; None: the admin's v2.output.budget_bytes (docs/runs.md).
    output_budget: str | int | None = None


class AdvancedTaskSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The user's own command (``kind: advanced``), run with ``bash -c`` after ``$HOME``
    expansion and the command checks (``argus.taskspec.checks``)."""

    kind: Literal["advanced"] = "advanced"
    workload: Workload
    nnodes: NNodes
    n_gpus_per_node: GpusPerNode
    command: Annotated[str, msgspec.Meta(min_length=1)]
    priority: Priority = 0
    max_attempts: Attempts = 3
    name: TaskName = ""  # a label for people, shown beside the task id
    time_limit: TimeLimit | None = None  # per attempt, from when it runs (argus.taskspec.timelimit)
    # No new training step for this long: stalled, stopped and resumed (docs/runs.md);
    # None: as the admin set it (v2.scheduler.stall), from the run's own step times.
    stall_timeout: TimeLimit | None = None
    # May be stopped to make room for a higher-priority task, or for a user under its fair
    # share; it goes back to its place in the queue and resumes from its checkpoints.
    # None (not said): as the user may have it (argus.service.limits.resolve_preemptible).
    preemptible: bool | None = None
    # The GPU model(s) the gang accepts, as the nodes are labelled (Ray's accelerator_type:
    # resource): one name, or a list of acceptable ones; None: any node's GPUs.
    # (Checked by argus.taskspec.spec._gpu_type_problem, not by constraints here: msgspec 0.22 crashed in its
    # garbage collection after a constrained array inside a union failed to convert.)
    gpu_type: str | tuple[str, ...] | None = None
    # Failure kinds and exit codes to retry on beyond Argus's own rule, e.g. [RUNTIME_ERROR,
    # 137]: a kind among those the admin allows (v2.taskspec.retry_on_kinds), an exit code
    # 1-255; at most v2.scheduler.retry_on_max such retries per task (docs/taskspec.md).
    # (Checked by argus.taskspec.spec._retry_on_problem, for the same reason as gpu_type.)
    retry_on: tuple[str | int, ...] = ()
    # How much of each attempt's output is kept (512MiB, 2GiB, or bytes), within the admin's
    # v2.output.max_budget_bytes; None: the admin's v2.output.budget_bytes (docs/runs.md).
    output_budget: str | int | None = None


TaskSpec: TypeAlias = BasicTaskSpec | AdvancedTaskSpec

RL_ONLY_FIELDS: tuple[str, ...] = (
    "ppo_mini_batch_size",
    "max_prompt_length",
    "max_response_length",
    "rollout_engine",
    "rollout_n",
    "rollout_tp",
)


def encode_taskspec(spec: TaskSpec) -> dict[str, Any]:
    """The spec as builtins (JSON-ready); ``parse_taskspec(encode_taskspec(s)) == s``."""
    # Through JSON rather than to_builtins: tuples become lists, so the result is exactly
    # what a JSON client would send back.
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(spec))
    return out
