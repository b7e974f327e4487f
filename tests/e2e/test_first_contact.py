"""First contact: the README's commands, as written, where a newcomer stands.

A copy of the working tree (what a fresh clone holds), the README's first command run
verbatim in it (a fresh virtualenv holding only ``pip install -e .``, then ``argus up``),
then the README's walkthrough block run verbatim in a second shell. Only the API port is
changed (an environment override and the URL in the walkthrough), so the test never
collides with a stack someone runs on 8080. A wrong flag, a missing dependency or a
login shell that loses the interpreter fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from argus.procs import free_ports

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INSTALL_AND_UP_TIMEOUT_S = 420.0


def readme_blocks() -> list[str]:
    """The README's ```bash blocks, in order."""
    return re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def copy_tree(dest: Path) -> None:
    """What a clone would hold: tracked files plus new ones not ignored."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def clean_env(port: int) -> dict[str, str]:
    """The environment of a new terminal: no virtualenv active, no Argus settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ARGUS_", "RAY_", "PYTHON", "VIRTUAL_ENV"))}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p and p != venv_bin)
    env["PATH"] = f"{Path(sys.base_exec_prefix) / 'bin'}:{env['PATH']}"  # a python3 to start from
    env["ARGUS_V2__API__PORT"] = str(port)
    return env


class Up(msgspec.Struct, kw_only=True):
    workdir: Path
    port: int
    env: dict[str, str]
    console: Path


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    workdir = tmp_path_factory.mktemp("first-contact") / "argus"
    copy_tree(workdir)
    port = free_ports(1)[0]
    env = clean_env(port)
    first, second = (block.strip() for block in readme_blocks()[0].strip().splitlines())
    assert second == "./scripts/test.sh"
    console = workdir.parent / "console.log"
    with open(console, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", first], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + INSTALL_AND_UP_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"the README's first command exited:\n{console.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"argus up not ready:\n{console.read_text()[-4000:]}"
            if "cluster ready" in console.read_text():
                break
            time.sleep(1.0)
        yield Up(workdir=workdir, port=port, env=env, console=console)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the README says
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            pytest.fail(f"argus up did not stop on Ctrl-C:\n{console.read_text()[-3000:]}")


def test_readme_walkthrough_verbatim(up: Up) -> None:
    walkthrough = readme_blocks()[1].replace("127.0.0.1:8080", f"127.0.0.1:{up.port}")
    assert "8080" not in walkthrough
    script = f"set -euo pipefail\n{walkthrough}\necho \"TASK=$TASK\"\n"
    run = subprocess.run(["bash", "-c", script], cwd=up.workdir, env=up.env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout[-4000:]}\nstderr:\n{run.stderr[-4000:]}"
    task = re.search(r"^TASK=(\S+)$", run.stdout, re.M).group(1)  # type: ignore[union-attr]
    out = run.stdout

    # The job ran with Argus's interpreter and ended well; watch printed one line per event.
    assert "succeeded with attempt 1" in out, out[-3000:]
    # The driver log, each line once (Ray forwards actor lines; once is enough).
    log = subprocess.run([str(up.workdir / ".venv/bin/argus"), "logs", task], cwd=up.workdir,
                         env={**up.env, "ARGUS_URL": f"http://127.0.0.1:{up.port}",
                              "ARGUS_TOKEN": (up.workdir / ".argus/admin.token").read_text().strip()},
                         capture_output=True, text=True, timeout=30).stdout
    steps = [ln for ln in log.splitlines() if "step:" in ln]
    assert len(steps) == 5, log  # total_training_steps=5 in the example
    doubled = [ln for ln, n in Counter(log.splitlines()).items() if n > 1 and ln.strip()]
    assert not doubled, f"lines printed more than once: {doubled[:5]}"
    # The outputs are listed; replay found argus up's database on its own.
    assert f"{task}--a01" in out
    assert "SUCCEEDED" in out


def test_follow_a_finished_log_is_an_event_stream(up: Up) -> None:
    token = (up.workdir / ".argus/admin.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{up.port}/api/v2", headers=headers, timeout=30) as c:
        tasks = c.get("/tasks").json()["items"]
        done = [t for t in tasks if t["state"] == "SUCCEEDED"]
        assert done, tasks
        with c.stream("GET", f"/tasks/{done[0]['task_id']}/logs", params={"follow": "true"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
