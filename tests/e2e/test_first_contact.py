"""First contact: the README's commands, as written, where a newcomer stands.

A copy of the working tree (what a fresh clone holds), the README's first command run
verbatim in it (a fresh virtualenv holding only ``pip install -e .``, then ``argus up``),
then the README's walkthrough block run verbatim in a second shell. Only the API port is
changed (an environment override and the URL in the walkthrough), so the test never
collides with a stack someone runs on 8080. A wrong flag, a missing dependency or a
login shell that loses the interpreter fails here.
"""

from __future__ import annotations

import contextlib
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
from tests.support.ray_cluster import startup_timeout_s

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


def guardian_temp_dirs(data_dir: Path) -> list[str]:
    """The Ray temp dirs that the guardians of stacks on ``data_dir`` name."""
    temp_dirs = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if b"argus.guardian" in args and str(data_dir).encode() in cmdline.parent.joinpath(
                    "environ").read_bytes():
                temp_dirs.append(args[args.index(b"--temp-dir") + 1].decode())
    return temp_dirs


def stack_processes(data_dir: Path) -> list[str]:
    """Processes of the stack on ``data_dir``: its path in their environment (what the
    stack starts inherits ARGUS_LOG_DIR) or a file open under it or under a Ray temp dir
    the stack's guardian names."""
    marks = [str(data_dir), *guardian_temp_dirs(data_dir)]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            hit = str(data_dir).encode() in (entry / "environ").read_bytes()
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    hit = hit or os.readlink(fd).startswith(tuple(marks))
            if hit:
                found.append(f"{entry.name} {(entry / 'cmdline').read_bytes()[:100]!r}")
    return found


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
    # The block's commands; its comment (argus up blocks: the tests go in another terminal) aside.
    first, second = (line.strip() for line in readme_blocks()[0].strip().splitlines()
                     if not line.strip().startswith("#"))
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
            # 60 s on a quiet host, more on a loaded one, as every start-up here is given
            # (a CI run beside two simulator processes took longer than 60 s).
            proc.wait(startup_timeout_s(60.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            pytest.fail(f"argus up did not stop on Ctrl-C:\n{console.read_text()[-3000:]}")
        left = stack_processes(workdir / ".argus")
        assert not left, f"left running after Ctrl-C: {left}"


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


def test_files_holding_secrets_are_the_owners_alone(up: Up) -> None:
    """The admin token and the effective configuration (which holds the event log's URL,
    password included) are 0600."""
    for name in ("admin.token", "config.yaml"):
        assert (up.workdir / ".argus" / name).stat().st_mode & 0o077 == 0, name


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


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_killed_argus_up_leaves_nothing(up: Up, tmp_path: Path, sig: signal.Signals) -> None:
    """No orphans: argus up stopped by SIGTERM, or killed without a chance to clean up,
    takes its Ray nodes, their agents and its watchdogs with it (Ctrl-C: the fixture)."""
    data_dir = tmp_path / "k9"
    port = free_ports(1)[0]
    console = tmp_path / "console.log"
    with open(console, "wb") as out:
        proc = subprocess.Popen([str(up.workdir / ".venv/bin/argus"), "up", "--data-dir", str(data_dir),
                                 "--port", str(port), "--gpus", "1"], cwd=tmp_path, env=up.env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "cluster ready" not in console.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, console.read_text()[-3000:]
            time.sleep(1.0)
        assert len(stack_processes(data_dir)) >= 6, "the scan must see the running stack"
        ray_dirs = guardian_temp_dirs(data_dir)
        assert len(ray_dirs) == 1 and Path(ray_dirs[0]).is_dir(), ray_dirs
        proc.send_signal(sig)
        proc.wait(40)  # SIGTERM: Ray's nodes get their grace period
        deadline = time.monotonic() + 10
        while (left := stack_processes(data_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"left running 10 s after {sig.name} of argus up: {left}"
        assert not Path(ray_dirs[0]).exists(), f"Ray's temp dir left after {sig.name}: {ray_dirs[0]}"
    finally:
        for line in stack_processes(data_dir):  # the test's own mess, by pid
            with contextlib.suppress(OSError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
