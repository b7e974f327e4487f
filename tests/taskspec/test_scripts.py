"""verl's example scripts pasted as an advanced command (issue 57): the published GRPO
script passes and expands to the overrides a one-line command gives; everything else a
script could do is still refused, every problem at once, with its line in the pasted text."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.taskspec import TaskSpecError
from argus.taskspec.checks import hub_ids
from argus.taskspec.command import parse_command
from tests.taskspec.support import Prepare, advanced

FIXTURE = Path(__file__).parent / "fixtures" / "verl_grpo_run_qwen2-7b.sh"
ALLOWED = ["verl.trainer."]
HEAD = "#!/usr/bin/env bash\nset -euxo pipefail\n# a comment\n\n"


def test_published_grpo_script_passes_and_expands(prepare: Prepare, shared_root: Path) -> None:
    script = FIXTURE.read_text()
    task = prepare(advanced(script, nnodes=1, n_gpus_per_node=8, workload="grpo"))
    one_line = script.split("set -x\n\n", 1)[1].replace(" $@\n", "\n")  # its attribution comment, too
    plain = prepare(advanced(one_line, nnodes=1, n_gpus_per_node=8, workload="grpo"))
    assert task.command == plain.command
    home = f"{shared_root}/users/alice"
    assert f"data.train_files={home}/datasets/gsm8k/train.parquet" in task.command
    assert "set -x" not in task.command and "$@" not in task.command
    assert task.command_raw == script
    assert any("'set -x' is ignored" in w and "line 3" in w for w in task.warnings)
    assert any("trailing $@ was dropped" in w and "line 36" in w for w in task.warnings)


def test_exports_become_assignments(prepare: Prepare) -> None:
    body = ("python3 -m verl.trainer.main_ppo \\\n  data.train_files=$HOME/datasets/a.parquet \\\n"
            "  trainer.nnodes=2 trainer.n_gpus_per_node=4 \"$@\"\n")
    task = prepare(advanced(HEAD + "export VLLM_USE_V1=1\nexport WANDB_MODE=\"offline\"\n" + body))
    plain = prepare(advanced("VLLM_USE_V1=1 WANDB_MODE=\"offline\" " + body.replace(' "$@"', "")))
    assert task.command == plain.command
    parsed = parse_command(HEAD + "export A=1 B='x y'\n" + body.replace("$HOME", "/h"),
                           allowed_modules=ALLOWED)
    assert parsed.assignments == [("A", "1"), ("B", "x y")]


@pytest.mark.parametrize(
    ("script", "field", "fragment"),
    [
        ("export LD_PRELOAD=/x.so\npython3 -m verl.trainer.main_ppo", "command[LD_PRELOAD]", "remove the assignment"),
        ("export PYTHONPATH=/h/code\npython3 -m verl.trainer.main_ppo", "command[PYTHONPATH]", "remove the assignment"),
        ("export A\npython3 -m verl.trainer.main_ppo", "command[export A]", "line 1"),
        ("A=1\npython3 -m verl.trainer.main_ppo", "command[A=1]", "line 1: 'A=1' sets a shell variable"),
        ("set -x\n\npython3 -m verl.trainer.main_ppo a=1; rm -rf /", "command[;]", "line 3, column"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 && rm -rf /", "command[&&]", "line 3, column"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 | tee x", "command[|]", "line 3, column"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 > out", "command[>]", "line 3, column"),
        ("python3 -m verl.trainer.main_ppo a=1\n\nrm -rf /", "command[rm -rf /]", "line 3: 'rm -rf /' is a second statement"),
        ("cd /tmp\npython3 -m verl.trainer.main_ppo a=1", "command[python3 -m verl.trainer.main_ppo a=1]", "line 2"),
        ("python3 -m verl.trainer.main_ppo $@ a=1", "command[$@]", "remove it"),
        ("# only a comment\nset -x\n", "command", "has no python3"),
    ],
)
def test_refused(script: str, field: str, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as info:
        parse_command(script, allowed_modules=ALLOWED)
    assert any(p.field == field and fragment in p.message for p in info.value.problems), info.value


def test_every_problem_at_once() -> None:
    script = ("set -x\nexport A\necho hi\npython3 -m verl.trainer.main_ppo \\\n"
              "  a=1 \\\n  b=2\npython3 -m verl.trainer.main_ppo c=3\n")
    with pytest.raises(TaskSpecError) as info:
        parse_command(script, allowed_modules=ALLOWED)
    messages = [p.message for p in info.value.problems]
    assert any(m.startswith("line 2:") for m in messages), messages
    assert any(m.startswith("line 4:") and "second statement" in m for m in messages), messages
    assert any(m.startswith("line 7:") and "second statement" in m for m in messages), messages


def test_hub_ids_of_a_pasted_script() -> None:
    expanded = FIXTURE.read_text().replace("$HOME", "/private/users/alice")
    assert hub_ids(expanded) == ["Qwen/Qwen2-7B-Instruct"]


def test_every_problem_of_the_shape_at_once_with_its_line_as_written() -> None:
    """One validation names every refused construct (operators, redirections, a refused
    variable, the wrong program), each with its line number and the line as pasted."""
    script = ("set -x\nexport LD_PRELOAD=/x.so\npython -m verl.trainer.main_ppo \\\n"
              "  data.train_files=a.parquet && \\\n  trainer.nnodes=1 | tee log \\\n  trainer.x=1 > out.txt\n")
    with pytest.raises(TaskSpecError) as info:
        parse_command(script, allowed_modules=ALLOWED)
    got = {p.field: p.message for p in info.value.problems}
    assert set(got) == {"command[LD_PRELOAD]", "command[python]", "command[&&]", "command[|]", "command[>]"}, got
    assert got["command[python]"].startswith("line 3: the program must be python3") and "(write python3)" in got["command[python]"]
    assert "(line 4, column 30) in 'data.train_files=a.parquet &&'" in got["command[&&]"]
    assert "(line 5, column 20) in 'trainer.nnodes=1 | tee log'" in got["command[|]"]
    assert "(line 6, column 15) in 'trainer.x=1 > out.txt'" in got["command[>]"]
    assert got["command[LD_PRELOAD]"].startswith("line 2: ")


def test_words_after_a_refused_construct_are_not_judged_as_the_command() -> None:
    """``python3;x -m ...``: only the ';' is named; no second problem about a program or
    module read from words bash would not run as this command."""
    with pytest.raises(TaskSpecError) as info:
        parse_command("python3;x -m verl.trainer.main_ppo a=1", allowed_modules=ALLOWED)
    assert [p.field for p in info.value.problems] == ["command[;]"]
