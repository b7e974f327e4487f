"""The operator's side of a damaged log (issue 54), as real processes: ``argus serve``
refuses it in one line, ``argus db check`` names the damage, ``argus replay verify``
reports a user changed in place as tampering at its position, and ``argus db
accept-loss`` lets a log whose tail was lost take writes again, after the lost positions."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.store.procs import REPO_ROOT, child_env
from tests.store.test_integrity import _crash_copy, _log, _payload


def argus(*args: object, config: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.pop("ARGUS_CONFIG", None)
    if config is not None:
        env["ARGUS_CONFIG"] = str(config)
    return subprocess.run([sys.executable, "-m", "argus", *map(str, args)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _config(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "argus.yaml"
    path.write_text(f"shared_root: {tmp_path / 'shared'}\nv2:\n  sqlite:\n    db_path: {db}\n")
    return path


def test_a_user_rewritten_in_place_is_refused_by_serve_and_named_by_check_and_verify(tmp_path: Path) -> None:
    db = tmp_path / "argus.sqlite3"
    positions = _log(db, 12)
    victim = positions[6]
    data = _payload(db, victim)
    db.write_bytes(db.read_bytes().replace(data, data.replace(b'"user":"alice"', b'"user":"bobby"')))
    before = db.read_bytes()

    served = argus("serve", "--port", "1", config=_config(tmp_path, db))
    assert served.returncode != 0
    assert f"TaskSubmitted at position {victim}" in served.stderr and "changed after it was written" in served.stderr
    assert "Traceback" not in served.stderr

    check = argus("db", "check", "--db", db)
    assert check.returncode == 1 and f"position {victim}" in check.stderr

    verify = argus("replay", "--db", db, "verify")
    assert verify.returncode == 1
    assert f"TAMPERING at position {victim}: the TaskSubmitted at position {victim}" in verify.stdout
    assert db.read_bytes() == before  # nothing above wrote into it


def test_accept_loss_after_a_cut_wal_then_appends_follow_the_lost_positions(tmp_path: Path) -> None:
    db, positions = _crash_copy(tmp_path, 30)
    wal = db.with_name(db.name + "-wal")
    with wal.open("r+b") as fh:
        fh.truncate(wal.stat().st_size // 2)
    check = argus("db", "check", "--db", db)
    assert check.returncode == 1 and "acknowledged event(s) are missing" in check.stderr
    missing = positions[-1] - int(check.stderr.split("the log ends at position ")[1].split(",")[0])
    assert f"--missing {missing}" in check.stderr

    wrong = argus("db", "accept-loss", "--db", db, "--missing", missing + 5)
    assert wrong.returncode != 0 and "nothing was recorded" in wrong.stderr
    ok = argus("db", "accept-loss", "--db", db, "--missing", missing, "--by", "ops")
    assert ok.returncode == 0, ok.stderr
    assert f"the next event is {positions[-1] + 1}" in ok.stdout
    assert argus("db", "check", "--db", db).returncode == 0
    status = argus("db", "status", "--db", db)
    assert f"high-water:     {positions[-1]}" in status.stdout
    assert f"lost:           positions {positions[-1] - missing + 1}..{positions[-1]} (accepted by ops)" in status.stdout
    shutil.rmtree(tmp_path / "live")
