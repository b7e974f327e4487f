"""The job driver confines the command with Landlock by default (v2.sandbox.mode: auto):
a hostile command reaches its own home and the shared read-only folders, and nothing of
another user's, of the control plane's data or of /tmp, whatever path it names."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from argus.config import ArgusConfig
from argus.confine import abi_version
from argus.driver import prepare_job_dir, run_command
from argus.rayjobs.submission import DriverContext, build_submission, decode_context


def _context(config: ArgusConfig, command: str) -> DriverContext:
    payload = build_submission(task_id="alice-t1", attempt_no=1, user="alice", command=command,
                               config=config, python=sys.executable)
    return decode_context(payload.entrypoint.split("--context ", 1)[1])


def _layout(tmp_path: Path) -> tuple[ArgusConfig, Path]:
    data = tmp_path / "data"
    shared = data / "shared"
    for user in ("alice", "bob"):
        (shared / "users" / user / "code").mkdir(parents=True)
    (shared / "users" / "bob" / "secret.txt").write_text("bob's\n")
    (shared / "datasets").mkdir()
    (shared / "datasets" / "public.txt").write_text("everyone's\n")
    (data / "admin.token").write_text("the-admin-token\n")
    (tmp_path / "loose.txt").write_text("in /tmp\n")
    config = ArgusConfig(shared_root=str(shared))
    config.v2.sqlite.db_path = str(data / "argus.sqlite3")
    return config, shared


@pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")
def test_a_hostile_command_reaches_only_its_home(tmp_path: Path) -> None:
    config, shared = _layout(tmp_path)
    bob = shared / "users" / "bob"
    alice = shared / "users" / "alice"
    (alice / "code" / "peek").symlink_to(bob / "secret.txt")  # a link out of the home
    attempts = {
        "OTHER-HOME-READ": f"cat {bob}/secret.txt",
        "OTHER-HOME-WRITE": f"echo x > {bob}/planted.txt",
        "LINK-OUT": f"cat {alice}/code/peek",
        "PROC-ROOT": f"cat /proc/self/root{bob}/secret.txt",
        "TOKEN": f"cat {tmp_path}/data/admin.token",
        "TMP": f"cat {tmp_path}/loose.txt",
        "SHARED-WRITE": f"echo x > {shared}/datasets/planted.txt",
        "LIST-USERS": f"ls {shared}/users",
        # its driver's reports to Argus (argus.rayjobs.reports): forged, for itself or another
        "FORGED-EXIT": f"echo '{{\"submission_id\": \"alice-t1--a01\", \"exit_code\": 0, \"exited_at\": 1}}' "
                       f"> {shared}/ray/attempts/exits/alice-t1--a01.json",
        "FORGED-PROGRESS": f"echo {{}} > {shared}/ray/attempts/progress/bob-t9--a01.json",
    }
    for folder in ("exits", "progress"):
        (shared / "ray" / "attempts" / folder).mkdir(parents=True)
    works = [
        f"echo mine > {alice}/new.txt && echo OWN-HOME-OK",
        f"cat {shared}/datasets/public.txt",
        f"{sys.executable} -c 'import tempfile, argus; tempfile.mkstemp(); print(\"PYTHON-OK\")'",
    ]
    command = "; ".join([*(f"{cmd} 2>/dev/null && echo {name}-ESCAPED || echo {name}-DENIED"
                           for name, cmd in attempts.items()), *works])
    ctx = _context(config, command)
    path = prepare_job_dir(ctx)
    result = run_command(ctx, path, out=io.BytesIO())
    log = (path / "driver.log").read_text()
    header, said, *lines = log.splitlines()  # the header echoes the command: not evidence
    assert "confined to their user's files (Landlock ABI" in said
    for name in attempts:
        assert f"{name}-DENIED" in lines and f"{name}-ESCAPED" not in lines, log
    for word in ("OWN-HOME-OK", "everyone's", "PYTHON-OK"):
        assert word in lines, log
    assert "bob's" not in log and "the-admin-token" not in log
    assert result.exit_code == 0, log
    assert sorted(p.name for p in bob.iterdir()) == ["code", "secret.txt"]
    assert not (shared / "datasets" / "planted.txt").exists()
    assert list((path / "tmp").iterdir()), "TMPDIR is the job's own tmp folder"


def test_required_landlock_missing_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = _layout(tmp_path)
    config.v2.sandbox.mode = "landlock"
    monkeypatch.setattr("argus.confine.job.abi_version", lambda: 0)
    ctx = _context(config, f"touch {tmp_path}/ran")
    path = prepare_job_dir(ctx)
    result = run_command(ctx, path, out=io.BytesIO())
    assert result.exit_code == 127
    assert "this kernel has no Landlock" in (path / "driver.log").read_text()
    assert not (tmp_path / "ran").exists()


def test_auto_without_landlock_runs_unconfined_and_says_so(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = _layout(tmp_path)
    monkeypatch.setattr("argus.confine.job.abi_version", lambda: 0)
    ctx = _context(config, f"touch {tmp_path}/ran")
    path = prepare_job_dir(ctx)
    assert run_command(ctx, path, out=io.BytesIO()).exit_code == 0
    assert "jobs are NOT confined: this kernel has no Landlock" in (path / "driver.log").read_text()
    assert (tmp_path / "ran").exists()
