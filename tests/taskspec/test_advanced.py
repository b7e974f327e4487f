"""Advanced TaskSpecs end to end through prepare_task: the seed's example, the table of
rejected commands from the issue, soft warnings, symlinks in a real tmp shared root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus.events.catalog import Demand
from argus.taskspec import TaskSpecError, prepare_task
from tests.taskspec.support import SEED_EXAMPLE, Prepare, advanced

PPO = "python3 -m verl.trainer.main_ppo"
OK_TAIL = " trainer.nnodes=2 trainer.n_gpus_per_node=4 +ray_kwargs.ray_init.address=auto"


def test_seed_example_passes(prepare: Prepare, shared_root: Path) -> None:
    task = prepare(SEED_EXAMPLE)
    home = f"{shared_root}/users/alice"
    assert task.kind == "advanced" and task.workload == "ppo"
    assert task.command_raw == SEED_EXAMPLE.split("command: |\n", 1)[1].replace("\n  ", "\n")[2:]
    assert f"data.train_files={home}/datasets/gsm8k/train.parquet" in task.command
    assert "$HOME" in task.command_raw and "$HOME" not in task.command
    assert task.demand == Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=13.0)
    assert task.priority == 0 and task.max_attempts == 3
    assert [w for w in task.warnings if "shared model cache" not in w] == ["workload: not set; ppo inferred from the command"]
    assert task.spec["kind"] == "advanced" and task.spec["command"] == task.command_raw


def test_common_datasets_hf_and_reward_in_code(prepare: Prepare, shared_root: Path) -> None:
    cmd = (f"{PPO} data.train_files=$HOME/common/datasets/gsm8k/train.parquet "
           "data.val_files=[$HOME/datasets/a.parquet,'$HOME/common/datasets/b.parquet'] "
           "actor_rollout_ref.model.path=$HOME/common/hf/Qwen2.5 "
           "critic.model.path=$HOME/models/m1 "
           "custom_reward_function.path=$HOME/code/reward.py custom_reward_function.name=compute_score "
           f"trainer.default_local_dir=${{ARGUS_JOB_DIR}}/ckpt{OK_TAIL}")
    task = prepare(advanced(cmd))
    assert f"data.train_files={shared_root}/datasets/gsm8k/train.parquet" in task.command
    assert f"custom_reward_function.path={shared_root}/users/alice/code/reward.py" in task.command
    assert task.warnings == []


def test_legacy_common_datasets_and_null_val(prepare: Prepare, shared_root: Path) -> None:
    cmd = f"{PPO} data.train_files={shared_root}/common/datasets/x.parquet data.val_files=null{OK_TAIL}"
    assert prepare(advanced(cmd)).warnings == []


# Each row: a command tail (after `python3 -m verl.trainer.main_ppo`), the field the error
# must name, and a fragment of its message. {root} is the tmp shared root.
REJECTED = [
    # traversal
    ("data.train_files=$HOME/datasets/../../bob/datasets/secret.parquet",
     "command[data.train_files]", "another user's home (bob)"),
    ("data.train_files=${HOME}/../bob/datasets/secret.parquet",
     "command[data.train_files]", "normalises to {root}/users/bob/datasets/secret.parquet"),
    ("data.train_files=$HOME/datasets/%2e%2e/%2e%2e/bob/x.parquet",
     "command[data.train_files]", "percent-encoding (%2e)"),
    ("data.train_files=$HOME/datasets/..%2F..%2Fbob/x.parquet",
     "command[data.train_files]", "percent-encoding"),
    ("data.train_files=../../users/bob/datasets/x.parquet",
     "command[data.train_files]", "relative path with '..'"),
    ("data.train_files=$HOME//datasets//..//..//bob/x.parquet",
     "command[data.train_files]", "another user's home (bob)"),
    ("trainer.default_local_dir=$HOME/jobs/../../bob/out",
     "command[trainer.default_local_dir]", "another user's home (bob)"),
    ("trainer.default_local_dir=${ARGUS_JOB_DIR}/../../../bob",
     "command[trainer.default_local_dir]", "another user's home (bob)"),
    ("trainer.default_local_dir=$HOME/..", "command[trainer.default_local_dir]", "the users directory"),
    # another user's home, written out
    ("data.train_files={root}/users/bob/datasets/secret.parquet",
     "command[data.train_files]", "another user's home (bob)"),
    ("hydra.searchpath=[file://{root}/users/bob/conf]",
     "command[hydra.searchpath]", "another user's home (bob)"),
    ("data.train_files=$HOME/datasets/a.parquet 'x={p: {root}/users/bob/q}'",
     "command[x]", "another user's home (bob)"),
    # $HOME tricks
    ("data.train_files=$HOMEX/datasets/a.parquet", "command[$HOMEX]", "Argus does not set"),
    ("data.train_files=${HOME}/../bob/x", "command[data.train_files]", "another user's home (bob)"),
    ("data.train_files=${HOMEDIR}/x", "command[${HOMEDIR}]", "Argus does not set"),
    # allow-lists
    ("data.train_files=$HOME/code/a.parquet", "command[data.train_files]", "under $HOME/datasets/"),
    ("data.train_files=/etc/passwd", "command[data.train_files]", "data files must be under"),
    ("data.train_files=$HOME/datasets", "command[data.train_files]", "data files must be under"),
    ("data.val_files=[$HOME/datasets/a.parquet,/tmp/b.parquet]", "command[data.val_files]", "/tmp/b.parquet"),
    ("custom_reward_function.path=$HOME/datasets/reward.py",
     "command[custom_reward_function.path]", "must be under $HOME/code/"),
    ("custom_reward_function.path=/tmp/reward.py",
     "command[custom_reward_function.path]", "must be under $HOME/code/"),
    ("custom_reward_function.path={root}/users/bob/code/reward.py",
     "command[custom_reward_function.path]", "another user's home (bob)"),
    ("reward.custom_reward_function.path=$HOME/code/../jobs/r.py",
     "command[reward.custom_reward_function.path]", "must be under $HOME/code/"),
    ("actor_rollout_ref.model.path=/opt/models/q", "command[actor_rollout_ref.model.path]", "hub id"),
    ("actor_rollout_ref.model.path=../models/q", "command[actor_rollout_ref.model.path]", "relative path"),
    ("actor_rollout_ref.model.path=a/b/c", "command[actor_rollout_ref.model.path]", "neither a hub id"),
    ("critic.model.path=$HOME/datasets/m", "command[critic.model.path]", "$HOME/models/"),
    # modules and shell chains
    ("data.train_files=$HOME/datasets/a.parquet ; rm -rf $HOME", "command[;]", "starts another one"),
    ("data.train_files=$HOME/datasets/a.parquet && curl x", "command[&&]", "chains a second command"),
    ("data.train_files=`cat /etc/x`", "command[`]", "command substitution"),
    ("data.train_files=$(ls)", "command[$(]", "command substitution"),
    # the gang written in the command must be the gang Argus reserves
    ("trainer.nnodes=3", "command[trainer.nnodes]", "disagrees with the spec's nnodes: 2"),
    ("trainer.n_gpus_per_node=8", "command[trainer.n_gpus_per_node]", "n_gpus_per_node: 4"),
    # the environment a spec hands Ray's workers (issue 54): the same variables refused
    ("+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=$HOME/code",
     "command[ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH]", "every worker of the job"),
    ("++ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=$HOME/code/x.so",
     "command[ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD]", "loads that library"),
    ("'+ray_kwargs.ray_init.runtime_env.env_vars={PYTHONSTARTUP: $HOME/code/s.py}'",
     "command[ray_kwargs.ray_init.runtime_env.env_vars]", "PYTHONSTARTUP may not be set"),
    ("'+ray_kwargs.ray_init.runtime_env={env_vars: {\"LD_LIBRARY_PATH\": $HOME/code}}'",
     "command[ray_kwargs.ray_init.runtime_env]", "LD_LIBRARY_PATH may not be set"),
    ("+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=evil.setup",
     "command[ray_kwargs.ray_init.runtime_env.worker_process_setup_hook]", "in every worker first"),
    ("'+ray_kwargs.ray_init.runtime_env={py_executable: /bin/sh}'",
     "command[ray_kwargs.ray_init.runtime_env]", "instead of the interpreter"),
    ("+actor_rollout_ref.rollout.env_vars.PYTHONUSERBASE=$HOME/code",
     "command[actor_rollout_ref.rollout.env_vars.PYTHONUSERBASE]", "usercustomize"),
    # NUL and control characters inside quotes
    ("'data.train_files=$HOME/datasets/a\tb'", "command[data.train_files]", "control character"),
]


def test_harmless_worker_variables_stay_allowed(prepare: Prepare) -> None:
    task = prepare(advanced(f"{PPO} +ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG=INFO "
                            "'+ray_kwargs.ray_init.runtime_env={env_vars: {VLLM_USE_V1: 1, PYTHONUNBUFFERED: 1}}'"))
    assert "env_vars.NCCL_DEBUG=INFO" in task.command


@pytest.mark.parametrize(("tail", "field", "fragment"), REJECTED)
def test_rejected(prepare: Prepare, shared_root: Path, tail: str, field: str, fragment: str) -> None:
    cmd = f"{PPO} " + tail.replace("{root}", str(shared_root))
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd))
    assert err.value.field == field, err.value
    assert fragment.replace("{root}", str(shared_root)) in err.value.message, err.value.message


def test_non_allowed_module(prepare: Prepare) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced("python3 -m http.server 8000", workload="ppo"))
    assert err.value.field == "command[http.server]"
    assert "allowed: verl.trainer.*, argus.examples.*" in err.value.message


def test_nul_byte_in_command_is_rejected(prepare: Prepare) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} data.train_files=$HOME/datasets/a\x00b"))
    assert err.value.field == "command['\\x00']"


def test_production_root_other_home_written_by_alice() -> None:
    # The documented production root; nothing needs to exist for the lexical check.
    with pytest.raises(TaskSpecError) as err:
        prepare_task(advanced(f"{PPO} data.train_files=/private/users/bob/datasets/x.parquet"),
                     user="alice", task_id="t1", shared_root=Path("/private"))
    assert err.value.field == "command[data.train_files]"
    assert "'/private/users/bob/datasets/x.parquet' is in another user's home (bob)" in err.value.message
    assert "/private/users/alice/" in err.value.message


def test_similar_user_name_is_another_user(prepare: Prepare, shared_root: Path) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} x={shared_root}/users/alice2/f"))
    assert "another user's home (alice2)" in err.value.message


def test_symlink_in_home_to_other_home(prepare: Prepare, shared_root: Path) -> None:
    os.symlink(shared_root / "users/bob/datasets", shared_root / "users/alice/datasets/shared")
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} data.train_files=$HOME/datasets/shared/secret.parquet"))
    assert err.value.field == "command[data.train_files]"
    assert "resolves through a symlink to" in err.value.message
    assert "another user's home (bob)" in err.value.message


def test_relative_symlink_in_code_to_other_home(prepare: Prepare, shared_root: Path) -> None:
    (shared_root / "users/alice/code/reward.py").unlink()
    os.symlink("../../bob/code/reward.py", shared_root / "users/alice/code/reward.py")
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} custom_reward_function.path=$HOME/code/reward.py"))
    assert "another user's home (bob)" in err.value.message


def test_symlink_out_of_the_allow_list(prepare: Prepare, shared_root: Path) -> None:
    os.symlink(shared_root / "users/alice/jobs", shared_root / "users/alice/datasets/jobs")
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} data.train_files=$HOME/datasets/jobs/a.parquet"))
    assert "resolves through a symlink to" in err.value.message
    assert "data files must be under" in err.value.message


def test_symlinked_other_home_target(prepare: Prepare, shared_root: Path, tmp_path: Path) -> None:
    # carol's home lives elsewhere (a symlink in users/); a link into it is still hers.
    elsewhere = tmp_path / "gpfs-carol"
    (elsewhere / "datasets").mkdir(parents=True)
    os.symlink(elsewhere, shared_root / "users/carol")
    os.symlink(elsewhere / "datasets", shared_root / "users/alice/datasets/c")
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} data.train_files=$HOME/datasets/c/x.parquet"))
    assert "another user's home (carol)" in err.value.message


def test_symlink_within_own_home_is_fine(prepare: Prepare, shared_root: Path) -> None:
    os.symlink(shared_root / "users/alice/datasets/gsm8k", shared_root / "users/alice/datasets/latest")
    cmd = f"{PPO} data.train_files=$HOME/datasets/latest/train.parquet{OK_TAIL}"
    assert prepare(advanced(cmd)).warnings == []


def test_soft_warnings_are_returned(prepare: Prepare) -> None:
    task = prepare(advanced(f"{PPO} actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B"))
    text = "\n".join(task.warnings)
    assert "no data.train_files=" in text
    assert "no +ray_kwargs.ray_init.address=auto" in text
    assert "no trainer.nnodes=; verl will use its default while Argus reserves nnodes=2" in text
    assert "no trainer.n_gpus_per_node=" in text


def test_workload_mismatch_warns(prepare: Prepare) -> None:
    doc = advanced(f"{PPO} data.train_files=$HOME/datasets/a.parquet{OK_TAIL}", workload="sft")
    task = prepare(doc)
    assert "workload: sft, but the command runs verl.trainer.main_ppo (ppo/grpo)" in task.warnings


def test_unknown_key_is_refused(prepare: Prepare) -> None:
    doc = advanced(f"{PPO} data.train_files=$HOME/datasets/a.parquet{OK_TAIL}")
    doc["colour"] = "red"
    with pytest.raises(TaskSpecError) as err:
        prepare(doc)
    assert err.value.field == "colour" and "unknown field" in err.value.message


def test_argus_examples_module_needs_no_verl_keys(prepare: Prepare) -> None:
    task = prepare(advanced("python3 -m argus.examples.sleep --seconds 1 data.train_files=$HOME/datasets/a"))
    assert task.warnings == []


def test_priority_and_attempts_are_carried(prepare: Prepare) -> None:
    doc = advanced(f"{PPO} data.train_files=$HOME/datasets/a.parquet{OK_TAIL}")
    doc.update(priority=5, max_attempts=1)
    task = prepare(doc)
    assert (task.priority, task.max_attempts) == (5, 1)


@pytest.mark.parametrize(("user", "field"), [("../bob", "user"), ("a/b", "user"), ("", "user")])
def test_server_side_names_are_checked(shared_root: Path, user: str, field: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare_task(SEED_EXAMPLE, user=user, task_id="t", shared_root=shared_root)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("tail", "field", "fragment"),
    [
        ("'data.train_files=${oc.env:HOME}/d.parquet'", "command[data.train_files]", "Hydra interpolation"),
        ("'actor_rollout_ref.model.path=${oc.env:M}'", "command[actor_rollout_ref.model.path]", "Hydra interpolation"),
        ("'x=${oc.env:PWD}/../../users/bob'", "command[x]", "interpolation with '..'"),
    ],
)
def test_hydra_interpolations_cannot_hide_paths(prepare: Prepare, tail: str, field: str, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} {tail}"))
    assert err.value.field == field and fragment in err.value.message, err.value


def test_interpolation_of_config_keys_is_fine(prepare: Prepare) -> None:
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet 'trainer.experiment_name=${{trainer.project_name}}-x'{OK_TAIL}"
    assert prepare(advanced(cmd)).warnings == []


def test_shared_root_must_be_plain(shared_root: Path) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare_task(SEED_EXAMPLE, user="alice", task_id="t", shared_root=Path("/mnt/my share"))
    assert err.value.field == "shared_root"


def test_the_example_trainer_runs_only_where_the_config_allows_it(
        prepare: Prepare, monkeypatch: pytest.MonkeyPatch) -> None:
    """argus.examples.* is not a production module: off by default, on where the config
    (argus up, the tests' environment) says so."""
    from argus.config import EXAMPLES_VARIABLE, TaskSpecConfig, load_config

    toy = advanced("python3 -m argus.examples.toy_trainer data.train_files=$HOME/datasets/a.parquet",
                   nnodes=1, n_gpus_per_node=1)
    with pytest.raises(TaskSpecError) as err:
        prepare(toy, config=TaskSpecConfig(allow_examples=False))
    assert err.value.field == "command[argus.examples.toy_trainer]"
    assert err.value.message.endswith("allowed: verl.trainer.*")
    assert prepare(toy, config=TaskSpecConfig(allow_examples=True)).command
    monkeypatch.delenv(EXAMPLES_VARIABLE, raising=False)
    assert TaskSpecConfig().allow_examples is False and load_config(None, environ={}).v2.taskspec.allow_examples is False
    assert load_config(None, environ={EXAMPLES_VARIABLE: "true"}).v2.taskspec.modules() == ["verl.trainer.", "argus.examples."]
