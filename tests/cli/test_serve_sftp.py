"""``argus serve`` with ``v2.sftp.port`` set: a real server process serves SFTP on that
port, says where on its console, makes its host key (0600) beside the database on the
first start and keeps it across a restart; a key file others can read stops the door, with
a line saying why, and the API still serves."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.sftp.conftest import needs_openssh

ADMIN = "serve-sftp-admin-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Serve:
    def __init__(self, root: Path) -> None:
        self.root, self.api_port, self.sftp_port = root, _free_port(), _free_port()
        (root / "config.yaml").write_text(
            f"shared_root: {root / 'shared'}\nv2:\n  sqlite: {{db_path: {root / 'argus.sqlite3'}, synchronous: NORMAL}}\n"
            f"  api: {{port: {self.api_port}}}\n  sftp: {{port: {self.sftp_port}, host: 127.0.0.1}}\n")
        self.log = root / "serve.log"
        env = {**os.environ, "ARGUS_ADMIN_TOKEN": ADMIN, "ARGUS_CONFIG": str(root / "config.yaml")}
        self.proc = subprocess.Popen([sys.executable, "-m", "argus", "serve"], env=env, cwd=root,
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}/api/v2",
                                headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.api.get("/sftp").status_code == 200 and "SFTP:" in self.log.read_text():
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.3)

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@needs_openssh
def test_argus_serve_runs_the_door_with_a_kept_host_key(tmp_path: Path) -> None:
    server = _Serve(tmp_path)
    try:
        door = server.api.get("/sftp").json()
        assert door == {"enabled": True, "port": server.sftp_port, "host_key_fingerprint": door["host_key_fingerprint"],
                        "password_auth": False}
        assert f"SFTP: sftp -P {server.sftp_port}" in server.log.read_text()
        key = tmp_path / "host_key_file_check"
        host_key = tmp_path / "sftp_host_ed25519_key"
        assert stat.S_IMODE(host_key.stat().st_mode) == 0o600
        server.api.post("/users", json={"user_id": "ann"}).raise_for_status()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        server.api.post("/users/ann/ssh-keys", json={"public_key": Path(f"{key}.pub").read_text()}).raise_for_status()
        (tmp_path / "ls.txt").write_text("ls\n")
        out = subprocess.run(["sftp", "-b", "ls.txt", "-P", str(server.sftp_port), "-i", str(key),
                              "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                              "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "ann@127.0.0.1"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "datasets" in out.stdout, out.stdout + out.stderr
    finally:
        server.stop()
    first = door["host_key_fingerprint"]
    server = _Serve(tmp_path)  # a restart keeps the host key
    try:
        assert server.api.get("/sftp").json()["host_key_fingerprint"] == first
    finally:
        server.stop()
    host_key.chmod(0o644)  # readable by others: refused, the API goes on
    server = _Serve(tmp_path)
    try:
        assert server.api.get("/sftp").json() == {"enabled": False, "port": 0, "host_key_fingerprint": "",
                                                   "password_auth": False}
        text = server.log.read_text()
        assert "must be a regular file of mode 0600" in text and "SFTP: did not start" in text, text
    finally:
        server.stop()
