"""EXAMPLE WORKLOAD — a toy, CPU-only trainer for demos and tests. Not verl, not a model.

    python -m argus.examples.toy_trainer data.train_files=train.jsonl \
        trainer.nnodes=1 trainer.n_gpus_per_node=2 trainer.total_training_steps=5

It behaves toward Ray the way verl's PPO trainer does, so Argus can be tested end to end
without GPUs: verl-style ``key=value`` overrides (``+`` prefixes accepted, unknown keys
ignored with a warning); ``ray.init(address="auto")``; a TaskRunner actor that runs verl's
exact total-GPU check (``ResourcePoolManager._check_resource_available``: the sum of
``available_resources_per_node()`` GPUs, failing with ``ValueError: Total available GPUs X
is less than total desired GPUs Y``); one STRICT_PACK placement group per node of
``[{"CPU": max_colocate_count, "GPU": 1}] * n_gpus_per_node``, waited for like verl; one
learner actor per bundle. GPUs are only *logical* here: nothing touches CUDA.

Outputs like verl: ``step:N - key:value`` lines on stdout; JSONL metrics in verl's file
logger format (``{"step": N, "data": {...}}``) at ``$VERL_FILE_LOGGER_PATH`` or
``$VERL_FILE_LOGGER_ROOT``/``<project>/<experiment>.jsonl`` (root ``.``); checkpoints in
``<default_local_dir>/global_step_N/`` plus ``latest_checkpointed_iteration.txt`` (a rerun
resumes from it). Paths are resolved in the driver's working directory.

Test knobs: ``trainer.step_sleep_s`` (make runs last), ``trainer.init_sleep_s`` (wait
before reserving the gang, as verl loads its tokenizer, data and models first: Ray shows the
GPUs free meanwhile), ``trainer.driver_sleep_s`` (the same, in the driver, before the
TaskRunner starts), ``trainer.fail_at_step`` (raise a
runtime error), ``trainer.max_colocate_count`` (CPUs in each GPU bundle: more than a node
has reproduces verl's endless wait on a placement group Ray cannot place). A missing train file is a user error: a clear message and exit code 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import yaml

__all__ = ["ToyConfig", "check_resource_available", "main", "parse_overrides"]


class ToyConfig(msgspec.Struct, kw_only=True):
    nnodes: int = 1
    n_gpus_per_node: int = 1
    total_training_steps: int = 5
    project_name: str = "argus_examples"
    experiment_name: str = "toy"
    default_local_dir: str = ""  # verl's default: checkpoints/<project>/<experiment>
    save_freq: int = -1  # -1: only the last step (verl saves nothing; a demo wants one)
    logger: list[str] = msgspec.field(default_factory=lambda: ["console", "file"])
    step_sleep_s: float = 0.0
    init_sleep_s: float = 0.0
    # Sleep in the driver, connected to Ray, before its TaskRunner starts: a running Ray
    # job with the fewest processes (tests/bench/bench_concurrency.py holds 100 at once).
    driver_sleep_s: float = 0.0
    fail_at_step: int = 0
    # Hang (sleep for ever, in _hang_here) at the start of this step, on attempt
    # hang_on_attempt only (the driver's ARGUS_ATTEMPT; 0: every attempt): a stalled run.
    hang_at_step: int = 0
    hang_on_attempt: int = 1
    max_colocate_count: int = 3  # verl's ResourcePoolManager default
    train_files: list[str] = []
    train_batch_size: int = 16
    group_size: int = 4  # actor_rollout_ref.rollout.n
    lr: float = 0.5
    seed: int = 1
    reward_path: str | None = None
    reward_name: str = "compute_score"
    reward_kwargs: dict[str, Any] = {}
    ray_address: str = "auto"


# override key (without "+") -> ToyConfig field
_KEYS = {
    "trainer.nnodes": "nnodes",
    "trainer.n_gpus_per_node": "n_gpus_per_node",
    "trainer.total_training_steps": "total_training_steps",
    "trainer.project_name": "project_name",
    "trainer.experiment_name": "experiment_name",
    "trainer.default_local_dir": "default_local_dir",
    "trainer.save_freq": "save_freq",
    "trainer.logger": "logger",
    "trainer.step_sleep_s": "step_sleep_s",
    "trainer.init_sleep_s": "init_sleep_s",
    "trainer.driver_sleep_s": "driver_sleep_s",
    "trainer.fail_at_step": "fail_at_step",
    "trainer.hang_at_step": "hang_at_step",
    "trainer.hang_on_attempt": "hang_on_attempt",
    "trainer.max_colocate_count": "max_colocate_count",
    "data.train_files": "train_files",
    "data.train_batch_size": "train_batch_size",
    "actor_rollout_ref.rollout.n": "group_size",
    "actor_rollout_ref.actor.optim.lr": "lr",
    "data.seed": "seed",
    "custom_reward_function.path": "reward_path",
    "custom_reward_function.name": "reward_name",
    "reward.custom_reward_function.path": "reward_path",
    "reward.custom_reward_function.name": "reward_name",
    "ray_kwargs.ray_init.address": "ray_address",
}
_KWARGS_PREFIXES = ("custom_reward_function.reward_kwargs.", "reward.custom_reward_function.reward_kwargs.")


def parse_overrides(argv: list[str]) -> tuple[ToyConfig, list[str]]:
    """Hydra-style ``key=value`` (values parsed as YAML) into a ToyConfig; returns the
    warnings about ignored keys. Raises ValueError on malformed or mistyped values."""
    doc: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    warnings: list[str] = []
    for arg in argv:
        if "=" not in arg:
            raise ValueError(f"override must be key=value, got {arg!r}")
        key, raw = arg.split("=", 1)
        key = key.lstrip("+~")
        value = yaml.safe_load(raw) if raw != "" else ""
        if key.startswith(_KWARGS_PREFIXES):
            kwargs[key.rsplit(".", 1)[1]] = value
        elif key in _KEYS:
            doc[_KEYS[key]] = value
        else:
            warnings.append(f"WARNING: toy_trainer ignores unknown override '{key}'")
    if isinstance(doc.get("train_files"), str):
        doc["train_files"] = [doc["train_files"]]
    if isinstance(doc.get("logger"), str):
        doc["logger"] = [doc["logger"]]
    doc["reward_kwargs"] = kwargs
    try:
        cfg = msgspec.convert(doc, ToyConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad override: {exc}") from exc
    if not cfg.default_local_dir:
        cfg.default_local_dir = f"checkpoints/{cfg.project_name}/{cfg.experiment_name}"
    return cfg, warnings


def check_resource_available(resource_pool_spec: dict[str, list[int]]) -> None:
    """verl's ``ResourcePoolManager._check_resource_available``, same semantics: total only."""
    import ray

    node_available_resources = ray._private.state.available_resources_per_node()
    node_available_gpus = {
        node: node_info.get("GPU", 0) if "GPU" in node_info else node_info.get("NPU", 0)
        for node, node_info in node_available_resources.items()
    }
    total_available_gpus = sum(node_available_gpus.values())
    total_required_gpus = sum(
        [n_gpus for process_on_nodes in resource_pool_spec.values() for n_gpus in process_on_nodes]
    )
    if total_available_gpus < total_required_gpus:
        raise ValueError(
            f"Total available GPUs {total_available_gpus} is less than total desired GPUs {total_required_gpus}"
        )


def _concat(metrics: dict[str, Any], step: int) -> str:
    """verl's ``concat_dict_to_str``: ``step:N - k:v - …`` (numbers only)."""
    import numbers
    import pprint

    parts = [f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in metrics.items()
                                if isinstance(v, numbers.Number)]
    return " - ".join(parts)


def _metrics_path(cfg: ToyConfig) -> str:
    if os.getenv("VERL_FILE_LOGGER_PATH"):
        return os.path.abspath(os.environ["VERL_FILE_LOGGER_PATH"])
    root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
    return os.path.abspath(os.path.join(root, cfg.project_name, f"{cfg.experiment_name}.jsonl"))


def _learner_cls() -> Any:
    import ray

    @ray.remote
    class Learner:
        """Holds a shard of the data role; one per GPU bundle (like a verl worker)."""

        def __init__(self, rank: int, cfg_doc: dict[str, Any]) -> None:
            from argus.examples import toy_policy
            from argus.examples.toy_trainer import ToyConfig

            cfg = msgspec.convert(cfg_doc, ToyConfig)

            self.rank, self.cfg, self.policy = rank, cfg, toy_policy
            self.reward_fn = toy_policy.load_reward_fn(cfg.reward_path, cfg.reward_name, cfg.reward_kwargs)

        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def step(self, weights: Any, samples: list[Any], answers: list[str], seed: int) -> dict[str, Any]:
            return self.policy.grad_step(weights, samples, answers, self.reward_fn,
                                         self.cfg.group_size, seed + self.rank)

    return Learner


def _task_runner_cls() -> Any:
    import ray

    @ray.remote(num_cpus=1)
    class TaskRunner:
        """Like verl's TaskRunner: checks resources, reserves the gang, drives training."""

        def run(self, cfg_doc: dict[str, Any], metrics_path: str | None) -> dict[str, Any]:
            from argus.examples.toy_trainer import ToyConfig

            cfg = msgspec.convert(cfg_doc, ToyConfig)
            spec = {"global_pool": [cfg.n_gpus_per_node] * cfg.nnodes}
            if cfg.init_sleep_s:
                time.sleep(cfg.init_sleep_s)
            check_resource_available(spec)
            learners = _reserve_gang(cfg, cfg_doc)
            nodes = sorted(set(ray.get([ln.node_id.remote() for ln in learners])))
            _train(cfg, learners, metrics_path)
            return {"nodes": nodes, "learners": len(learners), "steps": cfg.total_training_steps}

    return TaskRunner


def _reserve_gang(cfg: ToyConfig, cfg_doc: dict[str, Any]) -> list[Any]:
    """One placement group per node, as verl's resource pool makes them, and a Learner in
    each bundle."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    # The GPU model Argus admitted the task onto, asked of Ray as verl's
    # RayResourcePool(accelerator_type=...) asks it: a sliver of the node's label.
    model = os.environ.get("ARGUS_GPU_TYPE", "")
    bundles = [{"CPU": cfg.max_colocate_count, "GPU": 1,
                **({f"accelerator_type:{model}": 0.001} if model else {})}] * cfg.n_gpus_per_node
    pgs = [placement_group(bundles=bundles, strategy="STRICT_PACK", name=f"toy_global_pool:{i}")
           for i in range(cfg.nnodes)]
    print(f"waiting for {cfg.nnodes} placement group(s) of {bundles}", flush=True)
    ray.get([pg.ready() for pg in pgs])  # verl waits without a timeout, too
    Learner = _learner_cls()
    return [
        Learner.options(num_cpus=1, num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=b)).remote(len(pgs) * b + i, cfg_doc)
        for i, pg in enumerate(pgs) for b in range(cfg.n_gpus_per_node)
    ]


def _train(cfg: ToyConfig, learners: list[Any], metrics_path: str | None) -> None:
    """The training loop: from the latest checkpoint (verl's ``resume_mode=auto``) to the
    last step, a metrics line per step, a checkpoint every ``save_freq`` steps and at the end."""
    import numpy as np

    from argus.examples import toy_policy

    samples = toy_policy.load_samples(cfg.train_files)
    answers = sorted({s.ground_truth for s in samples})
    weights = np.zeros((toy_policy.FEATURE_DIM, len(answers)))
    ckpt_root = Path(cfg.default_local_dir)
    start = 0
    marker = ckpt_root / "latest_checkpointed_iteration.txt"
    if marker.is_file():  # resume like verl's resume_mode=auto
        start = int(marker.read_text().strip())
        weights = np.load(ckpt_root / f"global_step_{start}" / "policy.npy")
        print(f"resumed from checkpoint global_step_{start}", flush=True)
    log = open(metrics_path, "wb", buffering=0) if metrics_path else None
    print(f"Total training steps: {cfg.total_training_steps}", flush=True)  # as verl's RayPPOTrainer says it
    rng = np.random.default_rng(cfg.seed)
    for step in range(start + 1, cfg.total_training_steps + 1):
        weights, metrics = _step(cfg, learners, samples, answers, weights, rng, step)
        if "console" in cfg.logger:
            print(_concat(metrics, step), flush=True)
        if log is not None:
            log.write(json.dumps({"step": step, "data": metrics}).encode() + b"\n")
        last = step == cfg.total_training_steps
        if (cfg.save_freq > 0 and step % cfg.save_freq == 0) or last:
            d = ckpt_root / f"global_step_{step}"
            d.mkdir(parents=True, exist_ok=True)
            np.save(d / "policy.npy", weights)
            (d / "meta.json").write_text(json.dumps({"step": step, "answers": answers}))
            marker.write_text(str(step))
    if log is not None:
        log.close()


def _step(cfg: ToyConfig, learners: list[Any], samples: list[Any], answers: list[str], weights: Any, rng: Any,
          step: int) -> tuple[Any, dict[str, Any]]:
    """One step over the learners: the new weights, and the step's metrics as verl names them."""
    import ray

    t0 = time.time()
    if cfg.hang_at_step and step == cfg.hang_at_step:
        _hang_here(step)
    if cfg.fail_at_step and step == cfg.fail_at_step:
        raise RuntimeError(f"toy_trainer: failing at step {step} as asked (trainer.fail_at_step)")
    idx = rng.choice(len(samples), size=min(cfg.train_batch_size, len(samples)), replace=False)
    shards = [[samples[j] for j in idx[k::len(learners)]] for k in range(len(learners))]
    outs = ray.get([ln.step.remote(weights, sh, answers, cfg.seed * 100_003 + step)
                    for ln, sh in zip(learners, shards)])
    n = sum(o["n"] for o in outs)
    weights = weights + cfg.lr * sum(o["grad"] for o in outs) / n
    if cfg.step_sleep_s:
        time.sleep(cfg.step_sleep_s)
    return weights, {
        "critic/score/mean": float(sum(o["score_sum"] for o in outs) / (n * cfg.group_size)),
        "actor/pg_loss": float(sum(o["loss_sum"] for o in outs) / (n * cfg.group_size)),
        "actor/entropy": float(sum(o["entropy_sum"] for o in outs) / n),
        "val/greedy_score": float(sum(o["greedy_sum"] for o in outs) / n),
        "training/global_step": step,
        "timing_s/step": time.time() - t0,
    }


def _hang_here(step: int) -> None:
    """A stalled run: no further step, no error (what verl users see as "stuck at step N")."""
    print(f"toy_trainer: hanging at step {step} as asked (trainer.hang_at_step)", flush=True)
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--make-dataset"]:  # helper for demos: write the example dataset
        from argus.examples.toy_policy import make_example_dataset

        print(make_example_dataset(argv[1], n=int(argv[2]) if len(argv) > 2 else 128))
        return 0
    try:
        cfg, warnings = parse_overrides(argv)
    except ValueError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return 2
    for w in warnings:
        print(w, file=sys.stderr)
    # User errors are reported before touching Ray, with a message that says what to fix.
    if not cfg.train_files:
        print("ValueError: data.train_files is required", file=sys.stderr)
        return 1
    for path in cfg.train_files:
        if not Path(path).is_file():
            print(f"FileNotFoundError: data.train_files: no such file: {path}", file=sys.stderr)
            return 1
    cfg.train_files = [os.path.abspath(p) for p in cfg.train_files]
    cfg.default_local_dir = os.path.abspath(cfg.default_local_dir)
    # Which attempt this is, known here (the driver's environment), not in the actors.
    if cfg.hang_on_attempt not in (0, int(os.environ.get("ARGUS_ATTEMPT", "1"))):
        cfg.hang_at_step = 0
    if cfg.reward_path:
        cfg.reward_path = os.path.abspath(cfg.reward_path)
    metrics_path = _metrics_path(cfg) if "file" in cfg.logger else None
    if metrics_path:
        os.makedirs(os.path.dirname(metrics_path), exist_ok=True)
        print(f"Creating file logger at {metrics_path}", flush=True)

    import ray

    # Run -m, this file is __main__; build the actors from the importable module so that
    # workers resolve the same classes, and ship the config as plain data.
    from argus.examples import toy_trainer

    ray.init(address=cfg.ray_address)
    if cfg.driver_sleep_s:
        time.sleep(cfg.driver_sleep_s)
    runner = toy_trainer._task_runner_cls().remote()
    summary = ray.get(runner.run.remote(msgspec.to_builtins(cfg), metrics_path))  # a failure raises RayTaskError
    print(f"toy_trainer done: {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
