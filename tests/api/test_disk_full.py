"""A full disk (issue 54, part 1), on a real filesystem that fills: a small tmpfs holds
the event log (and, for uploads, the shared root). A write refused for lack of space is a
507 that says nothing was written and why; nothing refused is in the log; reads answer
200 while the disk is full; writes succeed again once there is space; a server started on
a full disk says so in one line.

Mounting needs root (or CAP_SYS_ADMIN); where it is refused the tests are skipped, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from litestar.testing import AsyncTestClient

from argus.api.app import create_app
from argus.store import MigrationError, migrate
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, _seed, make_config, put_dataset


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where``, unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file; return it (delete it to free the disk)."""
    filler = disk / f"filler-{uuid.uuid4().hex}"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:  # the last few bytes
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return filler


async def submitted(store: object) -> set[str]:
    rows = await store.read_snapshot(  # type: ignore[attr-defined]
        lambda db: db.execute("SELECT stream FROM events WHERE type = 'TaskSubmitted'").fetchall())
    return {r[0] for r in rows}


async def test_a_full_disk_refuses_writes_with_507_and_keeps_reads(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "6m") as disk:
        config = make_config(tmp_path)
        config.v2.sqlite.db_path = str(disk / "argus.sqlite3")
        config.shared_root = str(disk / "shared")
        config.v2.api.submit_burst = 0  # the rate limit is not under test
        app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
        async with AsyncTestClient(app=app) as client:
            tokens = await _seed(client)
            alice = {"Authorization": f"Bearer {tokens['alice']}"}
            put_dataset(Path(config.shared_root), "alice")
            r = await client.post("/api/v2/tasks", headers=alice, content=ADVANCED)
            assert r.status_code == 201, r.text
            first = r.json()["task_id"]
            store = app.state.store
            before = await submitted(store)

            filler = fill(disk)
            # Submissions (some at once, through the group commit) until the disk refuses:
            # the WAL may still have room for a few from frames it had already made.
            codes: list[int] = []
            accepted: set[str] = set()
            for _ in range(40):
                answers = await asyncio.gather(*[
                    client.post("/api/v2/tasks", headers=alice, content=ADVANCED) for _ in range(5)])
                for a in answers:
                    codes.append(a.status_code)
                    assert a.status_code in (201, 507), a.text
                    if a.status_code == 201:
                        accepted.add(f"task-{a.json()['task_id']}")
                    else:
                        body = a.json()
                        assert "disk is full" in body["detail"] and "nothing was written" in body["detail"], body
                        assert a.headers.get("retry-after"), "a 507 says when to retry"
                if codes[-5:] == [507] * 5:
                    break
            assert codes.count(507) >= 5, f"the full disk never refused a submission: {codes}"
            after = await submitted(store)
            assert after == before | accepted, "refused submissions must not be in the log"

            # Reads go on.
            r = await client.get("/api/v2/tasks", headers=alice)
            assert r.status_code == 200 and any(t["task_id"] == first for t in r.json()["items"]), r.text
            r = await client.get(f"/api/v2/tasks/{first}", headers=alice)
            assert r.status_code == 200, r.text
            # An upload: a 507 too, and no file (nor its temporary) left behind.
            r = await client.put("/api/v2/files/datasets/big.bin", headers=alice, content=b"x" * (1 << 20))
            assert r.status_code == 507, r.text
            assert "nothing was written" in r.json()["detail"]
            listing = await client.get("/api/v2/files/datasets/", headers=alice)
            assert listing.status_code == 200
            assert [e["name"] for e in listing.json()["entries"]] == ["toy"], listing.text

            # Space again: writes resume, on positions that follow on.
            filler.unlink()
            r = await client.post("/api/v2/tasks", headers=alice, content=ADVANCED)
            assert r.status_code == 201, r.text
            positions = await store.read_snapshot(
                lambda db: [p for (p,) in db.execute("SELECT position FROM events ORDER BY position")])
            assert positions == list(range(1, len(positions) + 1)), "no gap, no reuse"
            r = await client.put("/api/v2/files/datasets/small.bin", headers=alice, content=b"y" * 1000)
            assert r.status_code == 201, r.text


def test_migrating_on_a_full_disk_says_the_disk_is_full(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        filler = fill(disk)
        with pytest.raises(MigrationError) as err:
            migrate(disk / "new.sqlite3")
        assert "is full" in str(err.value) and str(disk) in str(err.value), err.value
        filler.unlink()


def test_serve_on_a_full_disk_says_so_in_one_line(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        config = tmp_path / "argus.yaml"
        config.write_text(yaml.safe_dump({"shared_root": str(tmp_path / "shared"), "v2": {
            "sqlite": {"db_path": str(disk / "argus.sqlite3")}, "api": {"port": 1}}}))
        filler = fill(disk)
        done = subprocess.run([sys.executable, "-m", "argus", "serve", "--config", str(config)],
                              env={**os.environ, "ARGUS_ADMIN_TOKEN": ADMIN_TOKEN},
                              capture_output=True, text=True, timeout=120)
        filler.unlink()
        assert done.returncode != 0
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert lines and "is full" in lines[-1] and "free space there" in lines[-1], done.stderr
        assert "Traceback" not in done.stderr, done.stderr
