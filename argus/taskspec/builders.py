"""verl command builders for basic specs, and the demand rule.

PPO and GRPO run ``python3 -m verl.trainer.main_ppo`` (GRPO adds
``algorithm.adv_estimator=grpo``); SFT runs ``python3 -m verl.trainer.sft_trainer_ray``.
We use the Ray SFT trainer, not ``torchrun -m verl.trainer.sft_trainer``: Argus submits one
Ray Job whose driver runs on one worker, and ``sft_trainer_ray`` places its GPU workers
through a Ray placement group across ``trainer.nnodes`` nodes exactly like PPO does, so
the gang Argus admits is the gang verl takes. torchrun would need a launcher and a
rendezvous on every node, outside Ray and invisible to the scheduler.

The job directory is per attempt and only known when the reactor starts one, so commands
name it ``${ARGUS_JOB_DIR}``; the driver wrapper exports it before ``bash -c``.
"""

from __future__ import annotations

import re
import shlex

from argus.events.catalog import Demand
from argus.scheduler.gpumodel import normalize
from argus.taskspec.spec import BasicTaskSpec

__all__ = [
    "CHECKPOINT_SUBDIR",
    "DEFAULT_MAX_COLOCATE_COUNT",
    "PROGRESS_FILE",
    "RL_DEFAULTS",
    "build_basic_command",
    "build_overrides",
    "cpus_per_node",
    "demand_for",
    "module_for",
    "quote_word",
]

JOB_DIR = "${ARGUS_JOB_DIR}"
# verl's `file` logger writes one JSON line per step to $VERL_FILE_LOGGER_PATH
# (verl/utils/tracking.py, FileLogger); Argus reads progress from it.
PROGRESS_FILE = "metrics.jsonl"
CHECKPOINT_SUBDIR = "checkpoints"
WORKER_RESOURCE = "worker_node"  # the custom resource only worker nodes have (docs/design.md)
# Where verl >= 0.9's TransferQueue may put its storage actors (see build_overrides).
TRANSFER_QUEUE_NODES = "transfer_queue.backend.SimpleStorage.required_node_resource"
# CPUs verl puts in each GPU bundle (verl 0.9: ResourcePoolManager.max_colocate_count = 3
# for PPO/GRPO; sft_trainer_ray reserves 10 CPUs per GPU worker).
MAX_COLOCATE_BY_WORKLOAD = {"ppo": 3, "grpo": 3, "sft": 10}
DEFAULT_MAX_COLOCATE_COUNT = 3

# Defaults of the RL-only tunables (None in the spec means these).
RL_DEFAULTS: dict[str, object] = {
    "ppo_mini_batch_size": 64,
    "max_prompt_length": 512,
    "max_response_length": 512,
    "rollout_engine": "vllm",
    "rollout_tp": 1,
}
LEARNING_RATE = {"ppo": 1e-6, "grpo": 1e-6, "sft": 1e-5}
ROLLOUT_N = {"ppo": 1, "grpo": 5}
CRITIC_LR = 1e-5

_SAFE_WORD_RE = re.compile(r"^[A-Za-z0-9_./:,=+@%-]+$")
# Left unquoted: runtime variables (bash must expand them) and the $HOME macro (Argus
# expands it textually; unquoted it reads as what the user wrote).
_RUNTIME_SPLIT_RE = re.compile(r"(\$\{ARGUS_[A-Z_]+\}|\$\{HOME\}|\$HOME(?![A-Za-z0-9_]))")


def cpus_per_node(
    n_gpus_per_node: int, max_colocate_count: int = DEFAULT_MAX_COLOCATE_COUNT
) -> float:
    """CPUs a task needs on each of its nodes.

    verl reserves its GPUs as a placement group of bundles ``{"GPU": 1, "CPU":
    max_colocate_count}`` and runs its TaskRunner actor with one CPU; the bundles only fit
    where both are free, and a shortfall makes verl wait forever instead of failing. So:
    ``n_gpus_per_node * max_colocate_count + 1``. The TaskRunner lands on one node only;
    counting it on every node keeps the rule per-node and errs on the side of fitting.
    """
    return float(n_gpus_per_node * max_colocate_count + 1)


def demand_for(
    nnodes: int, n_gpus_per_node: int, *, workload: str = "ppo", max_colocate_count: int | None = None,
    gpu_type: str | tuple[str, ...] | None = None,
) -> Demand:
    """The gang a task needs: ``nnodes`` nodes with the GPUs and CPUs of :func:`cpus_per_node`
    (CPUs per GPU bundle as verl reserves them for ``workload``, unless given), of the GPU
    model(s) ``gpu_type`` (a spec's field; None: any)."""
    if max_colocate_count is None:
        max_colocate_count = MAX_COLOCATE_BY_WORKLOAD.get(workload, DEFAULT_MAX_COLOCATE_COUNT)
    return Demand(
        nnodes=nnodes,
        n_gpus_per_node=n_gpus_per_node,
        cpus_per_node=cpus_per_node(n_gpus_per_node, max_colocate_count),
        gpu_types=normalize((gpu_type,) if isinstance(gpu_type, str) else gpu_type or ()),
    )


def module_for(workload: str) -> str:
    """The verl entry module of a basic workload."""
    return "verl.trainer.sft_trainer_ray" if workload == "sft" else "verl.trainer.main_ppo"


def quote_word(word: str) -> str:
    """Quote ``word`` for bash, leaving ``${ARGUS_*}`` unquoted so that bash expands it."""
    parts = []
    for part in _RUNTIME_SPLIT_RE.split(word):
        if not part:
            continue
        if _RUNTIME_SPLIT_RE.fullmatch(part) or _SAFE_WORD_RE.match(part):
            parts.append(part)
        else:
            parts.append(shlex.quote(part))
    return "".join(parts) or "''"


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _rl_overrides(spec: BasicTaskSpec, lr: float) -> dict[str, object]:
    """What a PPO or GRPO spec's fields set in verl's main_ppo config."""
    def pick(name: str) -> object:
        value = getattr(spec, name)
        return RL_DEFAULTS[name] if value is None else value

    mbs = spec.micro_batch_size_per_gpu
    o: dict[str, object] = {
        "data.max_prompt_length": pick("max_prompt_length"),
        "data.max_response_length": pick("max_response_length"),
        "actor_rollout_ref.model.path": spec.model_id,
        "actor_rollout_ref.actor.optim.lr": lr,
        "actor_rollout_ref.actor.ppo_mini_batch_size": pick("ppo_mini_batch_size"),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": mbs,
        "actor_rollout_ref.rollout.name": pick("rollout_engine"),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": pick("rollout_tp"),
        "actor_rollout_ref.rollout.n": spec.rollout_n or ROLLOUT_N[spec.workload],
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": mbs,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": mbs,
    }
    if spec.workload == "grpo":
        # GRPO regularises with a KL loss against the reference, not a KL reward.
        o["actor_rollout_ref.actor.use_kl_loss"] = True
        o["actor_rollout_ref.actor.kl_loss_coef"] = 0.001
        o["actor_rollout_ref.actor.kl_loss_type"] = "low_var_kl"
        o["algorithm.use_kl_in_reward"] = False
    else:
        o["critic.model.path"] = spec.model_id
        o["critic.optim.lr"] = CRITIC_LR
        o["critic.ppo_micro_batch_size_per_gpu"] = mbs
    return o


def _trainer_overrides(spec: BasicTaskSpec, *, user: str, task_id: str, rl: bool) -> dict[str, object]:
    """The ``trainer.*`` keys, and for PPO/GRPO how it joins and resumes on the cluster."""
    o: dict[str, object] = {"trainer.nnodes": spec.nnodes, "trainer.n_gpus_per_node": spec.n_gpus_per_node,
                            "trainer.total_epochs": spec.total_epochs}
    if spec.total_training_steps is not None:
        o["trainer.total_training_steps"] = spec.total_training_steps
    o["trainer.save_freq"] = spec.save_freq
    o["trainer.test_freq"] = spec.test_freq
    o["trainer.default_local_dir"] = f"{JOB_DIR}/{CHECKPOINT_SUBDIR}"
    o["trainer.logger"] = "[console,file]"
    o["trainer.project_name"] = f"argus-{user}"
    o["trainer.experiment_name"] = task_id
    if rl:
        # A later attempt (a retry, or back from preemption) finds the task's checkpoints
        # in its own job dir (the driver moves them there) and resumes from the latest.
        o["trainer.resume_mode"] = "auto"
        o["+ray_kwargs.ray_init.address"] = "auto"
        # verl >= 0.9 spreads its TransferQueue storage actors over every alive node, the
        # head included; on a head without CPUs (as Argus runs it) they are unschedulable
        # and the run dies in TaskRunner. Only worker nodes carry this resource.
        o[f"++{TRANSFER_QUEUE_NODES}"] = WORKER_RESOURCE
        # The PPO logger lives in verl's TaskRunner actor, which does not inherit the
        # driver's environment; pass the path through the Ray runtime env as well.
        env_key = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
        o[env_key] = f"{JOB_DIR}/{PROGRESS_FILE}"
    return o


def build_overrides(spec: BasicTaskSpec, *, user: str, task_id: str) -> dict[str, str | None]:
    """The Hydra overrides for ``spec`` as an ordered ``key -> value`` map (keys with their
    ``+`` prefix; None for a bare ``~key``). ``extra_overrides`` replace generated keys in
    place or are appended."""
    rl = spec.workload in ("ppo", "grpo")
    lr = spec.learning_rate if spec.learning_rate is not None else LEARNING_RATE[spec.workload]
    val = spec.val_file if spec.val_file is not None else ("null" if not rl else spec.train_file)
    o: dict[str, object] = {}
    if rl:
        o["algorithm.adv_estimator"] = "grpo" if spec.workload == "grpo" else "gae"
    o["data.train_files"] = spec.train_file
    o["data.val_files"] = val
    o["data.train_batch_size"] = spec.train_batch_size
    if rl:
        o.update(_rl_overrides(spec, lr))
    else:
        o["data.micro_batch_size_per_gpu"] = spec.micro_batch_size_per_gpu
        o["model.path"] = spec.model_id
        o["optim.lr"] = lr
    o.update(_trainer_overrides(spec, user=user, task_id=task_id, rl=rl))
    out: dict[str, str | None] = {key: _fmt(value) for key, value in o.items()}
    for extra in spec.extra_overrides:
        key, _sep, value = extra.partition("=")
        if key.startswith("~"):
            out[extra] = None  # a deletion is kept verbatim, after what it deletes
            continue
        bare = key.lstrip("+")
        # The same key with or without '+' replaces the generated value in place, so the
        # command names every key once.
        existing = next((k for k in out if k.lstrip("+") == bare), None)
        out[existing or key] = value
    return out


def build_basic_command(spec: BasicTaskSpec, *, user: str, task_id: str) -> str:
    """The verl command line for ``spec`` (with ``$HOME`` unexpanded, as written in the
    spec), one override per continued line."""
    env = [
        f"VERL_FILE_LOGGER_PATH={JOB_DIR}/{PROGRESS_FILE}",
        "PYTHONUNBUFFERED=1",
    ]
    head = " ".join(env + ["python3", "-m", module_for(spec.workload)])
    lines = [head]
    for key, value in build_overrides(spec, user=user, task_id=task_id).items():
        lines.append("  " + quote_word(key if value is None else f"{key}={value}"))
    return " \\\n".join(lines)
