"""What every attempt's command is told (``argus.driver.job_env``), through the driver's own
``run_command`` (a real subprocess): which task and attempt it is, and a W&B run that every
attempt of the task shares unless the user names their own."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from argus.config import ArgusConfig
from argus.driver import prepare_job_dir, run_command, wandb_run_id
from argus.rayjobs.submission import build_submission, decode_context

SHOW = ("python3 -c \"import os; print('|'.join(os.environ.get(k, '-') for k in "
        "('ARGUS_TASK_ID', 'ARGUS_ATTEMPT', 'WANDB_RUN_ID', 'WANDB_RESUME')))\"")


def _env_seen(tmp_path: Path, attempt_no: int, command: str) -> list[str]:
    shared = tmp_path / "shared"
    (shared / "users" / "alice" / "code").mkdir(parents=True, exist_ok=True)
    config = ArgusConfig(shared_root=str(shared))
    config.v2.sandbox.mode = "none"
    payload = build_submission(task_id="alice-ppo-20261203-101500-ab12", attempt_no=attempt_no, user="alice",
                               command=command, config=config, python=sys.executable)
    ctx = decode_context(payload.entrypoint.split("--context ", 1)[1])
    out = io.BytesIO()
    assert run_command(ctx, prepare_job_dir(ctx), out=out).exit_code == 0
    return out.getvalue().decode().strip().splitlines()[-1].split("|")


def test_each_attempt_knows_its_task_and_number_and_shares_one_wandb_run(tmp_path: Path) -> None:
    first = _env_seen(tmp_path, 1, SHOW)
    second = _env_seen(tmp_path, 2, SHOW)
    assert first == ["alice-ppo-20261203-101500-ab12", "1", "alice-ppo-20261203-101500-ab12", "allow"]
    assert second[1] == "2" and second[2:] == first[2:]


def test_the_users_own_wandb_run_wins(tmp_path: Path) -> None:
    seen = _env_seen(tmp_path, 1, "WANDB_RUN_ID=mine WANDB_RESUME=never " + SHOW)
    assert seen[2:] == ["mine", "never"]


def test_a_long_task_id_keeps_its_unique_end_in_a_hash() -> None:
    a, b = "u" * 60 + "-ab12", "u" * 60 + "-cd34"
    assert len(wandb_run_id(a)) == 64 and wandb_run_id(a) != wandb_run_id(b)
    assert wandb_run_id("bad id/é") == "bad_id__"


def test_a_command_recorded_with_a_refused_variable_is_not_run(tmp_path: Path) -> None:
    """A task recorded before PYTHONPATH was refused (issue 54) must not run with it on a
    retry: the driver refuses the command, saying why, and the user's sitecustomize never runs."""
    shared = tmp_path / "shared"
    code = shared / "users" / "alice" / "code"
    code.mkdir(parents=True)
    ran = tmp_path / "sitecustomize-ran"
    (code / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'w').write('yes')\n")
    config = ArgusConfig(shared_root=str(shared))
    config.v2.sandbox.mode = "none"
    payload = build_submission(task_id="alice-ppo-20261203-101500-ab12", attempt_no=1, user="alice",
                               command=f"PYTHONPATH={code} python3 -c 'print(1)'", config=config,
                               python=sys.executable)
    ctx = decode_context(payload.entrypoint.split("--context ", 1)[1])
    out = io.BytesIO()
    result = run_command(ctx, prepare_job_dir(ctx), out=out)
    assert result.exit_code == 127
    said = out.getvalue().decode()
    assert "the command is not run: PYTHONPATH may not be set" in said, said
    assert not ran.exists(), "the user's sitecustomize.py ran"
