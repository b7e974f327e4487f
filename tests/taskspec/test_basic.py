"""Basic TaskSpecs: the generated verl commands, field-level path checks, the demand rule,
and the generated command as bash really runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from argus.events.catalog import Demand
from argus.taskspec import TaskSpecError, cpus_per_node, demand_for, parse_taskspec
from argus.taskspec.builders import build_overrides, quote_word
from argus.taskspec.command import split_command
from argus.taskspec.spec import BasicTaskSpec
from tests.taskspec.support import Prepare

TASK_ID = "alice-ppo-20250101-000000-abcd"


def basic(workload: str = "ppo", **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "workload": workload,
        "nnodes": 2,
        "n_gpus_per_node": 4,
        "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
        "train_file": "$HOME/datasets/gsm8k/train.parquet",
        "val_file": "$HOME/common/datasets/gsm8k/test.parquet",
    }
    doc.update(fields)
    return doc


def overrides_of(doc: dict[str, Any]) -> dict[str, str | None]:
    spec = parse_taskspec(doc)
    assert isinstance(spec, BasicTaskSpec)
    return build_overrides(spec, user="alice", task_id=TASK_ID)


def test_ppo_command(prepare: Prepare, shared_root: Path) -> None:
    task = prepare(basic())
    assert task.kind == "basic" and task.workload == "ppo"
    assert task.command_raw.startswith(
        "VERL_FILE_LOGGER_PATH=${ARGUS_JOB_DIR}/metrics.jsonl PYTHONUNBUFFERED=1 "
        "python3 -m verl.trainer.main_ppo \\\n"
    )
    assert "data.train_files=$HOME/datasets/gsm8k/train.parquet" in task.command_raw
    assert f"data.train_files={shared_root}/users/alice/datasets/gsm8k/train.parquet" in task.command
    assert f"data.val_files={shared_root}/datasets/gsm8k/test.parquet" in task.command
    o = overrides_of(basic())
    assert o["algorithm.adv_estimator"] == "gae"
    assert o["trainer.nnodes"] == "2" and o["trainer.n_gpus_per_node"] == "4"
    assert o["trainer.default_local_dir"] == "${ARGUS_JOB_DIR}/checkpoints"
    assert o["trainer.logger"] == "[console,file]"
    assert o["trainer.project_name"] == "argus-alice" and o["trainer.experiment_name"] == TASK_ID
    assert o["actor_rollout_ref.rollout.name"] == "vllm"
    assert o["critic.model.path"] == o["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert o["actor_rollout_ref.actor.optim.lr"] == "1e-06"
    assert o["+ray_kwargs.ray_init.address"] == "auto"
    assert o["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == "${ARGUS_JOB_DIR}/metrics.jsonl"
    assert [w for w in task.warnings if "shared model cache" not in w] == []  # Qwen is not in this root's cache
    assert task.demand == Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=13.0)


def test_grpo_command() -> None:
    o = overrides_of(basic("grpo"))
    assert o["algorithm.adv_estimator"] == "grpo"
    assert o["actor_rollout_ref.rollout.n"] == "5"
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "True"
    assert "critic.model.path" not in o


def test_sft_command(prepare: Prepare) -> None:
    task = prepare(basic("sft", val_file=None))
    assert "python3 -m verl.trainer.sft_trainer_ray \\\n" in task.command
    o = overrides_of(basic("sft", val_file=None))
    assert o["model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert o["optim.lr"] == "1e-05" and o["data.val_files"] == "null"
    assert "algorithm.adv_estimator" not in o and "+ray_kwargs.ray_init.address" not in o
    assert o["trainer.default_local_dir"] == "${ARGUS_JOB_DIR}/checkpoints"
    assert [w for w in task.warnings if "shared model cache" not in w] == []


def test_tunables_reach_the_overrides() -> None:
    o = overrides_of(basic(
        total_epochs=3, total_training_steps=20, train_batch_size=32, micro_batch_size_per_gpu=2,
        learning_rate=3e-6, save_freq=-1, test_freq=5, ppo_mini_batch_size=16,
        max_prompt_length=1024, max_response_length=256, rollout_engine="sglang", rollout_n=2,
        rollout_tp=2,
    ))
    expected = {
        "trainer.total_epochs": "3", "trainer.total_training_steps": "20",
        "data.train_batch_size": "32", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "2",
        "actor_rollout_ref.actor.optim.lr": "3e-06", "trainer.save_freq": "-1",
        "trainer.test_freq": "5", "actor_rollout_ref.actor.ppo_mini_batch_size": "16",
        "data.max_prompt_length": "1024", "data.max_response_length": "256",
        "actor_rollout_ref.rollout.name": "sglang", "actor_rollout_ref.rollout.n": "2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
    }
    assert {k: o[k] for k in expected} == expected


def test_missing_val_file_for_rl_reuses_train_file_with_a_warning(prepare: Prepare) -> None:
    task = prepare(basic(val_file=None))
    assert "val_file: not set; validation will use train_file" in task.warnings
    assert overrides_of(basic(val_file=None))["data.val_files"] == "$HOME/datasets/gsm8k/train.parquet"


def test_extra_overrides_replace_in_place_or_append() -> None:
    o = overrides_of(basic(extra_overrides=[
        "data.train_batch_size=64", "+ray_kwargs.ray_init.address=ray://h:10001",
        "actor_rollout_ref.rollout.temperature=0.7", "~trainer.critic_warmup",
    ]))
    keys = list(o)
    assert o["data.train_batch_size"] == "64" and keys.index("data.train_batch_size") < 5
    assert o["+ray_kwargs.ray_init.address"] == "ray://h:10001"
    assert keys[-2:] == ["actor_rollout_ref.rollout.temperature", "~trainer.critic_warmup"]
    assert o["~trainer.critic_warmup"] is None


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"model_id": "/etc/models/q"}, "model_id", "hub id"),
        ({"model_id": "$HOME/../bob/models/m"}, "model_id", "another user's home (bob)"),
        ({"model_id": "$HOME/common/hf/../users/bob/m"}, "model_id", "another user's home (bob)"),
        ({"train_file": "$HOME/code/a.parquet"}, "train_file", "data files must be under"),
        ({"train_file": "/private/users/bob/datasets/a.parquet"}, "train_file", "data files must be under"),
        ({"train_file": "~/data/gsm8k/train.parquet"}, "train_file", "not an absolute path"),
        ({"val_file": "$HOME/datasets/%2e%2e/x"}, "val_file", "percent-encoding"),
        ({"val_file": "$HOME/datasets/a\x00b"}, "val_file", "control character"),
        ({"extra_overrides": ["custom_reward_function.path=$HOME/datasets/r.py"]},
         "extra_overrides[0]", "must be under $HOME/code/"),
        ({"extra_overrides": ["ok=1", "x=$HOME/../bob/y"]}, "extra_overrides[1]", "another user's home (bob)"),
        ({"extra_overrides": ["data.val_files=[$HOME/datasets/a,/tmp/b]"]}, "extra_overrides[0]", "/tmp/b"),
    ],
)
def test_field_level_path_errors(prepare: Prepare, fields: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(basic(**fields))
    assert err.value.field == field, err.value
    assert fragment in err.value.message, err.value.message


def test_model_paths_under_models_and_hf(prepare: Prepare, shared_root: Path) -> None:
    prepare(basic(model_id="$HOME/models/m1"))
    prepare(basic(model_id="$HOME/common/hf/Qwen2.5"))
    # The seed platform's (v3.0) real path of the shared cache, as its specs name it.
    (shared_root / "common/hf/Qwen2.5").mkdir(parents=True)
    task = prepare(basic(model_id=f"{shared_root}/common/hf/Qwen2.5"))
    assert f"model.path={shared_root}/common/hf/Qwen2.5" in task.command
    with pytest.raises(TaskSpecError, match="common/hf-x"):
        prepare(basic(model_id=f"{shared_root}/common/hf-x/Qwen2.5"))


def test_hostile_extra_override_values_stay_one_word(prepare: Prepare) -> None:
    task = prepare(basic(extra_overrides=["trainer.experiment_name=x; rm -rf / $(id) `id`"]))
    words = [w.value for w in split_command(task.command)]
    assert "trainer.experiment_name=x; rm -rf / $(id) `id`" in words


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("a=1", "a=1"),
        ("a=[x,y]", "'a=[x,y]'"),
        ("d=${ARGUS_JOB_DIR}/c k", "d=${ARGUS_JOB_DIR}'/c k'"),
        ("p=$HOME/a b", "p=$HOME'/a b'"),
        ("", "''"),
    ],
)
def test_quote_word(word: str, quoted: str) -> None:
    assert quote_word(word) == quoted


def test_demand_rule() -> None:
    assert cpus_per_node(8) == 25.0  # verl 0.9 PPO/GRPO: 3 CPUs per GPU bundle + TaskRunner
    assert cpus_per_node(8, max_colocate_count=1) == 9.0
    assert demand_for(2, 4) == Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=13.0)
    assert demand_for(1, 2, workload="sft").cpus_per_node == 21.0
    assert demand_for(1, 2, max_colocate_count=10).cpus_per_node == 21.0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("workload", ["ppo", "grpo", "sft"])
def test_generated_command_runs_under_bash_as_built(
    prepare: Prepare, shared_root: Path, tmp_path: Path, workload: str
) -> None:
    """Run the expanded command with bash and a python3 shim: bash must pass exactly
    the built overrides, with ${ARGUS_JOB_DIR} expanded, and export the logger path."""
    extra = ["trainer.experiment_name=a b;c", "+x.y=${ARGUS_JOB_DIR}/z"]
    task = prepare(basic(workload, extra_overrides=extra))
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([os.environ.get('VERL_FILE_LOGGER_PATH'), sys.argv[1:]]))\n"
    )
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:{os.environ.get('PATH', '')}", "ARGUS_JOB_DIR": "/J", "HOME": str(tmp_path)}
    # `bash -c`, not `-lc`: login files reset PATH and would hide the shim; what is under
    # test is how bash splits and expands the command, which -l does not change.
    out = subprocess.run(["bash", "-c", task.command], env=env, capture_output=True, text=True, check=True)
    logger_path, argv = json.loads(out.stdout)
    assert logger_path == "/J/metrics.jsonl"
    spec = parse_taskspec(basic(workload, extra_overrides=extra))
    assert isinstance(spec, BasicTaskSpec)
    built = build_overrides(spec, user="alice", task_id=TASK_ID)
    expected = ["-m", "verl.trainer.sft_trainer_ray" if workload == "sft" else "verl.trainer.main_ppo"] + [
        (k if v is None else f"{k}={v}")
        .replace("${ARGUS_JOB_DIR}", "/J")
        .replace("$HOME/common/datasets", f"{shared_root}/datasets")
        .replace("$HOME", f"{shared_root}/users/alice")
        for k, v in built.items()
    ]
    assert argv == expected
    assert "trainer.experiment_name=a b;c" in argv
