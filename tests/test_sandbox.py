"""The opt-in job sandbox (v2.sandbox.mode: bwrap): off by default; when on, the job's
command sees its own home (writable) and the shared read-only folders, and nothing of
another user's. docs/security.md says what it does not confine (Ray's own workers)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from argus.config import ArgusConfig
from argus.driver import prepare_job_dir, run_command
from argus.confine.sandbox import Sandbox, bwrap_argv
from argus.rayjobs.submission import build_submission, decode_context


def _context(config: ArgusConfig, command: str) -> object:
    payload = build_submission(task_id="alice-t1", attempt_no=1, user="alice", command=command,
                               config=config)
    return decode_context(payload.entrypoint.split("--context ", 1)[1])


def test_landlock_by_default_bwrap_or_nothing_on_request() -> None:
    config = ArgusConfig()
    assert config.v2.sandbox.mode == "auto"
    box = _context(config, "true").sandbox  # type: ignore[attr-defined]
    # The event log's folder is hidden from the job, however it is reached.
    assert box == Sandbox(mode="auto", hidden=[os.path.dirname(os.path.abspath("argus.sqlite3"))])
    config.v2.sandbox.mode = "none"
    assert _context(config, "true").sandbox is None  # type: ignore[attr-defined]


def test_bwrap_travels_in_the_context() -> None:
    config = ArgusConfig()
    config.v2.sandbox.mode = "bwrap"
    box = _context(config, "true").sandbox  # type: ignore[attr-defined]
    assert box == Sandbox(bwrap="bwrap", read_only=[], writable=[])
    # A context recorded before Landlock came (no mode) still means bubblewrap.
    assert msgspec.json.decode(b'{"bwrap": "bwrap"}', type=Sandbox).mode == "bwrap"


def test_layout_shows_no_other_home() -> None:
    argv = bwrap_argv(Sandbox(read_only=["/srv/shared/users/bob"], writable=["/srv/shared/users/bob/x"]),
                      shared_root="/srv/shared", user="alice", workdir="/srv/shared/users/alice/jobs/a",
                      needed=["/srv/shared/users/bob/code", "/srv/shared/verl", "/usr/lib/python3"])
    text = " ".join(argv)
    assert "bob" not in text
    # The shared root is hidden before the home is bound back, writable, in it.
    assert argv.index("/srv/shared") < argv.index("--bind")
    assert argv[argv.index("--bind") + 1] == "/srv/shared/users/alice"
    assert ["--ro-bind-try", "/srv/shared/verl", "/srv/shared/verl"] == argv[
        argv.index("/srv/shared/verl") - 1:argv.index("/srv/shared/verl") + 2]
    assert "/usr/lib/python3" not in argv  # visible anyway: / is bound read-only
    assert argv[-3:] == ["--chdir", "/srv/shared/users/alice/jobs/a", "--"]


def _bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                            "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap missing or no user namespaces here")
def test_the_command_sees_its_home_and_nothing_of_another(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    for user in ("alice", "bob"):
        (shared / "users" / user / "datasets").mkdir(parents=True)
    (shared / "users" / "bob" / "datasets" / "secret.txt").write_text("bob's\n")
    (shared / "datasets").mkdir()
    (shared / "datasets" / "public.txt").write_text("everyone's\n")
    (shared / "ray" / "discovery").mkdir(parents=True)
    config = ArgusConfig(shared_root=str(shared))
    config.v2.sandbox.mode = "bwrap"
    bob = shared / "users" / "bob"
    command = "; ".join([
        f"cat {bob}/datasets/secret.txt || echo NO-BOB",
        f"ls {shared}/users",
        f"echo mine > {shared}/users/alice/datasets/new.txt && echo WROTE-OWN",
        f"cat {shared}/datasets/public.txt",
        f"echo x > {shared}/datasets/planted.txt || echo SHARED-READ-ONLY",
        # Lands in the sandbox's empty stand-in for the shared root, discarded at exit.
        f"mkdir -p {bob}/datasets; echo x > {bob}/datasets/planted.txt",
        f"ls {shared}/ray || echo NO-CONTROL-PLANE",
        f"{sys.executable} -c 'import sys; print(\"PYTHON-OK\")'",
    ])
    ctx = _context(config, command)
    path = prepare_job_dir(ctx)  # type: ignore[arg-type]
    result = run_command(ctx, path, out=io.BytesIO())  # type: ignore[arg-type]
    header, _, log = (path / "driver.log").read_text().partition("\n")  # the header shows the command
    assert "in a bwrap sandbox" in header
    seen = log.split()
    for word in ("NO-BOB", "WROTE-OWN", "everyone's", "SHARED-READ-ONLY", "NO-CONTROL-PLANE",
                 "PYTHON-OK"):
        assert word in seen, log
    assert "bob's" not in log
    assert "alice" in seen and "bob" not in seen  # ls of the users folder: only the home
    assert result.exit_code == 0, log
    # Nothing written outside the home; the home's writes landed.
    assert sorted(p.name for p in (bob / "datasets").iterdir()) == ["secret.txt"]
    assert not (shared / "datasets" / "planted.txt").exists()
    assert (shared / "users" / "alice" / "datasets" / "new.txt").read_text() == "mine\n"


def test_a_missing_bwrap_fails_closed(tmp_path: Path) -> None:
    config = ArgusConfig(shared_root=str(tmp_path / "shared"))
    config.v2.sandbox.mode = "bwrap"
    config.v2.sandbox.bwrap = "no-such-bwrap-binary"
    ctx = _context(config, f"touch {tmp_path}/ran")
    path = prepare_job_dir(ctx)  # type: ignore[arg-type]
    result = run_command(ctx, path, out=io.BytesIO())  # type: ignore[arg-type]
    assert result.exit_code == 127
    assert "apt-get install bubblewrap" in (path / "driver.log").read_text()
    assert not (tmp_path / "ran").exists()


def test_the_log_shows_the_command_as_run_with_its_lines(tmp_path: Path) -> None:
    """The header shows a multi-line command as a shell would take it (real line breaks,
    quoted once), not Python's repr with ``\\n`` escapes."""
    config = ArgusConfig(shared_root=str(tmp_path / "shared"))
    command = "echo one \\\n  two"
    ctx = _context(config, command)
    path = prepare_job_dir(ctx)  # type: ignore[arg-type]
    result = run_command(ctx, path, out=io.BytesIO())  # type: ignore[arg-type]
    assert result.exit_code == 0
    text = (path / "driver.log").read_text()
    assert "bash -c 'echo one \\\n  two'\n" in text and "\\n" not in text
    assert text.endswith("one two\n")
