"""The job's interpreter is the deployment's (v2.taskspec.python), written into the expanded
command where everyone sees it; the driver runs it with ``bash -c`` (no login shell that
could reset PATH to another Python)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from argus.config import TaskSpecConfig
from argus.taskspec import prepare_task

SPEC = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 1
command: |
  PYTHONUNBUFFERED=1 python3 -u -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=1
"""


def _prepare(shared_root: Path, python: str) -> str:
    return prepare_task(SPEC, user="alice", task_id="alice-ppo-20250101-000000-abcd",
                        shared_root=shared_root, config=TaskSpecConfig(python=python)).command


def test_default_keeps_python3(shared_root: Path) -> None:
    assert _prepare(shared_root, "python3").startswith("PYTHONUNBUFFERED=1 python3 -u -m ")


def test_the_deployment_interpreter_replaces_python3_only(shared_root: Path) -> None:
    python = "/opt/venvs/argus env/bin/python"  # a space: it must arrive as one word
    command = _prepare(shared_root, python)
    assert command.startswith(f"PYTHONUNBUFFERED=1 {shlex.quote(python)} -u -m argus.examples.toy_trainer ")
    assert command.count("python3") == 0


def test_bash_runs_exactly_that_interpreter(shared_root: Path) -> None:
    """What the driver does with it: ``bash -c`` (not a login shell) runs this Python."""
    command = _prepare(shared_root, sys.executable).replace(
        "-m argus.examples.toy_trainer", "-c 'import sys; print(sys.executable)'", 1)
    command = command.split(" trainer.nnodes")[0]
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert out == sys.executable
