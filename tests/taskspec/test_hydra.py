"""The generated commands against verl's own Hydra configs.

verl is installed for the tests with ``--no-deps`` (scripts/test.sh): importing it would
need torch, but its shipped YAML configs compose with hydra-core alone. Each command is
split the way bash splits it, ``${ARGUS_JOB_DIR}`` is given a real tmp path, and the
overrides are composed onto the config the entry module's ``@hydra.main`` names. Hydra's
configs are structs: an override of a key that does not exist fails composition.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

hydra = pytest.importorskip("hydra")
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from argus.taskspec import prepare_task  # noqa: E402
from argus.taskspec.command import parse_command  # noqa: E402
from tests.taskspec.support import SEED_EXAMPLE  # noqa: E402

_VERL = importlib.util.find_spec("verl")
pytestmark = pytest.mark.skipif(
    _VERL is None or not _VERL.submodule_search_locations,
    reason="verl's package is not installed (scripts/test.sh installs it with --no-deps)",
)
VERL_DIR = Path(next(iter(_VERL.submodule_search_locations))) if _VERL and _VERL.submodule_search_locations else Path()
CONFIG_DIR = VERL_DIR / "trainer" / "config"


def config_name_of(module: str) -> str:
    """The config the module's ``@hydra.main`` composes, read from its source (importing
    verl would need torch)."""
    source = (VERL_DIR.parent / (module.replace(".", "/") + ".py")).read_text()
    match = re.search(r"@hydra\.main\([^)]*config_name=\"([^\"]+)\"", source)
    assert match, f"{module} has no @hydra.main(config_name=...)"
    return match.group(1)


@pytest.fixture(autouse=True)
def _clean_hydra() -> Iterator[None]:
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def compose_command(command: str, job_dir: Path) -> DictConfig:
    parsed = parse_command(command, allowed_modules=["verl.trainer."])
    overrides = [arg.replace("${ARGUS_JOB_DIR}", str(job_dir)) for arg in parsed.args]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=config_name_of(parsed.module), overrides=overrides)


def basic(workload: str, **fields: Any) -> dict[str, Any]:
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


ALL_TUNABLES: dict[str, Any] = {
    "total_epochs": 2, "total_training_steps": 7, "train_batch_size": 64,
    "micro_batch_size_per_gpu": 2, "learning_rate": 2e-6, "save_freq": 5, "test_freq": -1,
}
RL_TUNABLES: dict[str, Any] = {
    "ppo_mini_batch_size": 32, "max_prompt_length": 256, "max_response_length": 128,
    "rollout_engine": "sglang", "rollout_n": 4, "rollout_tp": 2,
}


@pytest.mark.parametrize(
    ("workload", "fields"),
    [
        ("ppo", {}),
        ("grpo", {}),
        ("sft", {}),
        ("ppo", {**ALL_TUNABLES, **RL_TUNABLES}),
        ("grpo", {**ALL_TUNABLES, **RL_TUNABLES, "extra_overrides": [
            "actor_rollout_ref.rollout.temperature=0.7",
            "custom_reward_function.path=$HOME/code/reward.py",
            "custom_reward_function.name=compute_score",
            "trainer.logger=[console,file,tensorboard]",
        ]}),
        ("sft", {**ALL_TUNABLES, "val_file": None, "extra_overrides": ["data.max_length=2048"]}),
    ],
)
def test_generated_command_composes(shared_root: Path, tmp_path: Path, workload: str, fields: dict[str, Any]) -> None:
    task = prepare_task(basic(workload, **fields), user="alice", task_id="alice-t-1", shared_root=shared_root)
    job_dir = tmp_path / "job"
    cfg = compose_command(task.command, job_dir)
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 4
    assert cfg.trainer.default_local_dir == f"{job_dir}/checkpoints"
    assert "file" in list(cfg.trainer.logger) and "console" in list(cfg.trainer.logger)
    assert cfg.trainer.project_name == "argus-alice" and cfg.trainer.experiment_name == "alice-t-1"
    assert cfg.data.train_files == f"{shared_root}/users/alice/datasets/gsm8k/train.parquet"
    assert cfg.trainer.total_epochs == fields.get("total_epochs", 1)
    if workload == "sft":
        assert cfg.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
        assert cfg.optim.lr == fields.get("learning_rate", 1e-5)
    else:
        assert cfg.algorithm.adv_estimator == ("grpo" if workload == "grpo" else "gae")
        assert cfg.actor_rollout_ref.rollout.name == fields.get("rollout_engine", "vllm")
        assert cfg.actor_rollout_ref.actor.optim.lr == fields.get("learning_rate", 1e-6)
        assert cfg.ray_kwargs.ray_init.address == "auto"
        env_vars = cfg.ray_kwargs.ray_init.runtime_env.env_vars
        assert env_vars.VERL_FILE_LOGGER_PATH == f"{job_dir}/metrics.jsonl"
    # Every interpolation the overrides feed must still resolve.
    OmegaConf.to_container(cfg, resolve=True)


def test_grpo_with_reward_function_sets_it(shared_root: Path, tmp_path: Path) -> None:
    doc = basic("grpo", extra_overrides=["custom_reward_function.path=$HOME/code/reward.py"])
    task = prepare_task(doc, user="alice", task_id="t", shared_root=shared_root)
    cfg = compose_command(task.command, tmp_path)
    assert cfg.custom_reward_function.path == f"{shared_root}/users/alice/code/reward.py"


@pytest.mark.parametrize(
    ("workload", "typo"),
    [
        ("ppo", "actor_rollout_ref.rollout.temprature=0.7"),
        ("grpo", "trainer.nnode=2"),
        ("sft", "optim.learning_rate=1e-5"),
    ],
)
def test_a_typo_in_a_key_fails_composition(shared_root: Path, tmp_path: Path, workload: str, typo: str) -> None:
    task = prepare_task(basic(workload, extra_overrides=[typo]), user="alice", task_id="t", shared_root=shared_root)
    with pytest.raises(Exception, match="Could not override|Key .* is not in struct"):
        compose_command(task.command, tmp_path)


def test_a_typo_in_a_generated_key_fails_composition(shared_root: Path, tmp_path: Path) -> None:
    task = prepare_task(basic("ppo"), user="alice", task_id="t", shared_root=shared_root)
    broken = task.command.replace("critic.ppo_micro_batch_size_per_gpu=", "critic.ppo_micro_batch_size_per_gpux=")
    assert broken != task.command
    with pytest.raises(Exception, match="Could not override"):
        compose_command(broken, tmp_path)


def test_seed_advanced_example_composes(shared_root: Path, tmp_path: Path) -> None:
    task = prepare_task(SEED_EXAMPLE, user="alice", task_id="t", shared_root=shared_root)
    cfg = compose_command(task.command, tmp_path)
    assert cfg.trainer.nnodes == 2 and cfg.trainer.save_freq == 10
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_webuis_advanced_template_composes(shared_root: Path, tmp_path: Path) -> None:
    """The WebUI's advanced template (verl's GRPO example in script form) names only keys
    verl's config has."""
    from argus.ui import TEMPLATES_DIR

    text = (TEMPLATES_DIR / "advanced.yaml").read_text(encoding="utf-8")
    task = prepare_task(text, user="alice", task_id="t", shared_root=shared_root, require_files=False)
    cfg = compose_command(task.command, tmp_path)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.rollout.n == 5
    assert cfg.trainer.n_gpus_per_node == 4
