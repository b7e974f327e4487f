"""Ctrl-C on a server with a browser open: the open event streams end cleanly, the server
exits promptly, and the console shows no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import yaml

from argus.procs import free_ports

TOKEN = "admin-token-for-shutdown-0123456789abcdef"


def test_ctrl_c_with_open_streams_is_clean(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    config = tmp_path / "argus.yaml"
    config.write_text(yaml.safe_dump({"shared_root": str(tmp_path / "shared"), "v2": {
        "sqlite": {"db_path": str(tmp_path / "argus.sqlite3")}, "api": {"port": port}}}))
    env = {**os.environ, "ARGUS_ADMIN_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "argus", "serve", "--config", str(config)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
            time.sleep(0.2)
        ended: list[str] = []

        def listen(path: str) -> None:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            try:
                with httpx.stream("GET", f"{url}{path}", headers=headers, timeout=30) as r:
                    for _ in r.iter_lines():
                        pass
                ended.append("clean")
            except httpx.HTTPError as exc:
                ended.append(type(exc).__name__)

        threads = [threading.Thread(target=listen, args=("/api/v2/events?after=0",)) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        took = time.monotonic() - started
        for t in threads:
            t.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "Traceback" not in text and "Exception in ASGI" not in text, text
    assert took < 3.0, f"shutdown took {took:.1f} s (streams held it to the graceful timeout)"
    assert ended == ["clean"] * 3
