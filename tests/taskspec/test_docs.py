"""docs/taskspec.md (and its worked examples, docs/taskspec-examples.md) stays true: its YAML examples are accepted and its generated PPO command
is what the builder produces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from argus.taskspec import TaskSpecError, prepare_task

DOCS = Path(__file__).resolve().parents[2] / "docs"
TEXT = (DOCS / "taskspec.md").read_text() + "\n" + (DOCS / "taskspec-examples.md").read_text()
YAML_BLOCKS = re.findall(r"```yaml\n(.*?)```", TEXT, re.S)


def test_the_doc_has_examples() -> None:
    assert len(YAML_BLOCKS) >= 4


# The doc's files are under the production root /private, which this machine lacks:
# require_files=False, so only the spec and its paths are checked.
@pytest.mark.parametrize("block", YAML_BLOCKS)
def test_yaml_examples_are_accepted(block: str) -> None:
    task = prepare_task(block, user="alice", task_id="alice-ppo-20250101-120000-7f3a",
                        shared_root=Path("/private"), require_files=False)
    assert task.command and task.demand.nnodes >= 1


def test_generated_ppo_command_in_the_doc_is_current() -> None:
    shown = TEXT.split("**Basic PPO**", 1)[1].split("```\n", 1)[1].split("```", 1)[0].strip()
    task = prepare_task(YAML_BLOCKS[0], user="alice", task_id="alice-ppo-20250101-120000-7f3a",
                        shared_root=Path("/private"), require_files=False)
    assert task.command == shown


def test_rejected_table_in_the_doc_is_current() -> None:
    rows = re.findall(r"^\| `(.+?)` \| `(command\[[^\]]+\]): ", TEXT, re.M)
    assert len(rows) >= 5
    for tail, field in rows:
        command = tail if tail.startswith("python3") else f"python3 -m verl.trainer.main_ppo {tail}"
        doc = {"kind": "advanced", "workload": "ppo", "nnodes": 1, "n_gpus_per_node": 8, "command": command}
        with pytest.raises(TaskSpecError) as err:
            prepare_task(doc, user="alice", task_id="t", shared_root=Path("/private"),
                         require_files=False)
        assert err.value.field == field
