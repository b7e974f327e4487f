"""SFTP fixtures: the API app with its SFTP door on a free port (a real SSH server on a
real socket), seeded with the API tests' users, and an ed25519 key pair per user made by
the real ``ssh-keygen`` and registered through the API."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from argus.api.app import create_app
from argus.sftp import sftp_background
from tests.api.conftest import ADMIN_TOKEN, Env, _seed, make_config

CLIENTS = ("sftp", "scp", "ssh-keygen")
needs_openssh = pytest.mark.skipif(any(shutil.which(c) is None for c in CLIENTS),
                                   reason="the OpenSSH clients (apt-get install openssh-client)")


class Door(msgspec.Struct, kw_only=True):
    env: Env
    port: int
    keys: dict[str, Path]  # user -> private key file
    tmp: Path

    @property
    def shared(self) -> Path:
        return self.env.shared

    def home(self, user: str) -> Path:
        return self.shared / "users" / user

    async def sftp(self, user: str, commands: str, key: Path | None = None,
                   timeout: float = 60.0) -> tuple[int, str]:
        """Run the real ``sftp`` in batch mode as ``user``; (exit code, stdout+stderr)."""
        batch = self.tmp / f"batch-{user}.txt"
        batch.write_text(commands)
        proc = await asyncio.create_subprocess_exec(
            "sftp", "-b", str(batch), *self.ssh_options(user, key, port_flag="-P"),
            f"{user}@127.0.0.1", cwd=self.tmp,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        return proc.returncode or 0, out.decode(errors="replace")

    def ssh_options(self, user: str, key: Path | None = None, port_flag: str = "-P") -> list[str]:
        return [port_flag, str(self.port), "-i", str(key or self.keys[user]),
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                "-o", "ConnectTimeout=30"]


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture
async def door(tmp_path: Path) -> AsyncIterator[Door]:
    from litestar.testing import AsyncTestClient

    config = make_config(tmp_path)
    config.v2.sftp.host, config.v2.sftp.recheck_s = "127.0.0.1", 0.2
    config.v2.sftp.password_auth = True
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5,
                     background=[sftp_background(config, port=0)])
    async with AsyncTestClient(app=app, timeout=30) as client:
        tokens = await _seed(client)
        env = Env(client=client, app=app, config=config, tokens=tokens)
        for _ in range(600):
            if getattr(app.state, "sftp", None) is not None:
                break
            await asyncio.sleep(0.05)
        assert app.state.sftp is not None, "the SFTP door did not start"
        keys = {}
        for user in ("alice", "bob", "admin"):
            keys[user] = keygen(tmp_path / f"id_{user}")
            r = await client.post(f"/api/v2/users/{user}/ssh-keys", headers=env.h(user),
                                  json={"public_key": (tmp_path / f"id_{user}.pub").read_text()})
            assert r.status_code == 201, r.text
        yield Door(env=env, port=app.state.sftp.port, keys=keys, tmp=tmp_path)
