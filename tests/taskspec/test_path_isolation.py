"""Issue 23, item 2: the path policy refuses /proc, /sys and /dev (as written, normalised or
through a symlink), and any path the kernel would resolve elsewhere than its text says (a
``..`` after a symlink), for spec fields and command arguments alike; each message says
what to write instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus.taskspec import TaskSpecError
from argus.taskspec.kernelpaths import LinkHops, pseudo_root
from tests.taskspec.support import Prepare, advanced

PPO = "python3 -m verl.trainer.main_ppo"
OK_TAIL = " trainer.nnodes=2 trainer.n_gpus_per_node=4 +ray_kwargs.ray_init.address=auto"
FIX = "write the real path"

PSEUDO = [
    # (the command's tail, the field named, a fragment of the message); {root}: the shared root
    ("trainer.default_local_dir=/proc/self/root{root}/users/bob/ckpt",
     "command[trainer.default_local_dir]", "is in /proc"),
    ("trainer.default_local_dir=/proc/1/root{root}/users/bob", "command[trainer.default_local_dir]",
     "is in /proc"),
    ("trainer.default_local_dir=/proc/self/cwd/..", "command[trainer.default_local_dir]",
     "normalises to /proc/self, in /proc"),
    ("trainer.default_local_dir=/tmp/../proc/self/root/x", "command[trainer.default_local_dir]",
     "normalises to /proc/self/root/x, in /proc"),
    ("trainer.default_local_dir=//proc//self/root", "command[trainer.default_local_dir]", "/proc"),
    ("trainer.rollout_data_dir=/sys/kernel", "command[trainer.rollout_data_dir]", "is in /sys"),
    ("trainer.rollout_data_dir=/dev/shm/x", "command[trainer.rollout_data_dir]", "is in /dev"),
    ("x=[/tmp/a,/proc/self/environ]", "command[x]", "is in /proc"),
    ("data.train_files=/proc/self/root{root}/users/alice/datasets/a.parquet",
     "command[data.train_files]", "is in /proc"),
    ("custom_reward_function.path=/proc/self/cwd/reward.py",
     "command[custom_reward_function.path]", "is in /proc"),
    ("actor_rollout_ref.model.path=/proc/self/root{root}/hf/Qwen2.5",
     "command[actor_rollout_ref.model.path]", "is in /proc"),
]


@pytest.mark.parametrize(("tail", "field", "fragment"), PSEUDO)
def test_pseudo_filesystems_are_refused(prepare: Prepare, shared_root: Path, tail: str,
                                        field: str, fragment: str) -> None:
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet " + tail.replace("{root}", str(shared_root))
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd + OK_TAIL))
    assert err.value.field == field, err.value
    assert fragment in err.value.message and FIX in err.value.message, err.value.message


def test_a_pseudo_path_in_an_environment_assignment_or_plain_argument(prepare: Prepare) -> None:
    for cmd in (f"VERL_FILE_LOGGER_PATH=/proc/self/cwd {PPO} data.train_files=$HOME/datasets/a.parquet",
                f"{PPO} data.train_files=$HOME/datasets/a.parquet /proc/1/root/etc"):
        with pytest.raises(TaskSpecError, match="in /proc"):
            prepare(advanced(cmd + OK_TAIL))


def test_basic_spec_fields_refuse_proc(prepare: Prepare, shared_root: Path) -> None:
    doc = {"kind": "basic", "workload": "ppo", "nnodes": 1, "n_gpus_per_node": 1,
           "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
           "train_file": f"/proc/self/root{shared_root}/users/alice/datasets/a.parquet"}
    with pytest.raises(TaskSpecError) as err:
        prepare(doc)
    assert err.value.field == "train_file" and "is in /proc" in err.value.message


def test_dev_null_is_allowed(prepare: Prepare) -> None:
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet trainer.rollout_data_dir=/dev/null"
    assert prepare(advanced(cmd + OK_TAIL)).warnings == []


def test_a_symlink_into_proc_is_refused(prepare: Prepare, shared_root: Path) -> None:
    # A job left $HOME/jobs/p -> /proc/self/cwd: on the worker that is the job's own cwd.
    os.symlink("/proc/self/cwd", shared_root / "users/alice/jobs/p")
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet trainer.default_local_dir=$HOME/jobs/p/../bob"
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd + OK_TAIL))
    assert err.value.field == "command[trainer.default_local_dir]"
    message = err.value.message
    assert "symbolic link" in message and ("/proc" in message or "'..'" in message), message
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet trainer.default_local_dir=$HOME/jobs/p/x"
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd + OK_TAIL))
    assert f"goes through the symbolic link {shared_root}/users/alice/jobs/p into /proc" \
        in err.value.message and FIX in err.value.message


def test_a_chain_of_links_into_proc_is_refused(prepare: Prepare, shared_root: Path, tmp_path: Path) -> None:
    os.symlink("/proc/self", tmp_path / "self")
    os.symlink(tmp_path / "self", shared_root / "users/alice/jobs/q")
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet trainer.default_local_dir=$HOME/jobs/q/cwd"
    with pytest.raises(TaskSpecError, match="into /proc"):
        prepare(advanced(cmd + OK_TAIL))


def test_a_data_path_through_a_symlink_and_dotdot_is_refused(prepare: Prepare, shared_root: Path) -> None:
    # Normalised, $HOME/datasets/link/../secret.parquet is alice's (and exists); the kernel
    # goes to the link's target first, then up: bob's datasets.
    (shared_root / "users/bob/datasets/sub").mkdir()
    os.symlink(shared_root / "users/bob/datasets/sub", shared_root / "users/alice/datasets/link")
    (shared_root / "users/alice/datasets/secret.parquet").write_bytes(b"PAR1")
    cmd = f"{PPO} data.train_files=$HOME/datasets/link/../secret.parquet"
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd + OK_TAIL))
    assert err.value.field == "command[data.train_files]"
    assert "'..' after a symbolic link" in err.value.message
    assert f"{shared_root}/users/bob/datasets/secret.parquet" in err.value.message
    assert "without '..'" in err.value.message


def test_dotdot_without_a_symlink_is_still_fine(prepare: Prepare) -> None:
    cmd = f"{PPO} data.train_files=$HOME/datasets/gsm8k/../a.parquet"
    assert prepare(advanced(cmd + OK_TAIL)).warnings == []


def test_a_path_outside_the_shared_root_that_resolves_into_another_home(
        prepare: Prepare, shared_root: Path, tmp_path: Path) -> None:
    # Resolved on the API server too (exact when the worker is the same machine).
    os.symlink(shared_root / "users/bob", tmp_path / "to-bob")
    cmd = f"{PPO} data.train_files=$HOME/datasets/a.parquet trainer.default_local_dir={tmp_path}/to-bob/x"
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd + OK_TAIL))
    assert "another user's home (bob)" in err.value.message


def test_pseudo_root_and_link_walk_units(tmp_path: Path) -> None:
    assert pseudo_root("/proc") == "/proc" and pseudo_root("/sys/x") == "/sys"
    assert pseudo_root("/dev/null") is None and pseudo_root("/device") is None
    assert pseudo_root("/processes") is None
    os.symlink("/", tmp_path / "root")
    os.symlink("/dev/null", tmp_path / "null")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    hops = LinkHops()
    assert hops.into_pseudo(f"{tmp_path}/root/proc/1") == (f"{tmp_path}/root", "/proc")
    assert hops.into_pseudo(f"{tmp_path}/root/dev/null") is None
    assert hops.into_pseudo(f"{tmp_path}/null") is None
    assert hops.into_pseudo(f"{tmp_path}/root/etc") is None
    assert hops.into_pseudo(f"{tmp_path}/loop/x") is None  # a loop reaches nothing
