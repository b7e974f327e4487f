"""Helpers shared by the TaskSpec tests (fixtures are in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from argus.taskspec import PreparedTask

Prepare = Callable[..., PreparedTask]


def advanced(command: str, *, nnodes: int = 2, n_gpus_per_node: int = 4, workload: str = "ppo") -> dict[str, Any]:
    """An advanced spec as a mapping around ``command``."""
    return {
        "kind": "advanced",
        "workload": workload,
        "nnodes": nnodes,
        "n_gpus_per_node": n_gpus_per_node,
        "command": command,
    }


# The requirements' own example TaskSpec, verbatim.
SEED_EXAMPLE = """\
kind: advanced

# 资源(平台调度与预检查用;仍需要)
nnodes: 2
n_gpus_per_node: 4

# 自定义命令(用户负责写对 VERL 的参数/路径)
# 平台会对 $HOME 做宏替换;其余保持原样
command: |
  PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\
    data.train_files=$HOME/datasets/gsm8k/train.parquet \\
    data.val_files=$HOME/datasets/gsm8k/test.parquet \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\
    trainer.nnodes=2 \\
    trainer.n_gpus_per_node=4 \\
    trainer.total_epochs=1 \\
    trainer.save_freq=10 \\
    +ray_kwargs.ray_init.address=auto
"""
