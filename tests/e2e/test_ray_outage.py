"""Ray's head dies under a running stack and stays away past Ray's GCS reconnect limit: `argus up` keeps serving.

kill -9 of the head's GCS while a task runs and another waits, with the head's watchdog
held (SIGSTOP) so that no new head starts for ``AWAY_S``; then the watchdog goes on and
`argus up` restarts the head at the same address (a new cluster id). Before, the API and
the reactor died with the head: Ray's in-process GCS client aborted `argus up` ("Failed
to connect to GCS within 60 seconds", then ``WrongClusterID`` once the head came back).
Now: the API answers every poll throughout, `argus up` stays up, the interrupted attempt
ends CLUSTER_LOST and is retried, the waiting task runs, and the log verifies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from argus.procs import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.ray]

# Ray gives up on an unreachable GCS after ``gcs_rpc_server_reconnect_timeout_s`` (60 s by
# default), which is what aborted `argus up`. The stack runs with that limit at 20 s, and
# the head stays away past it: the same failure, a minute sooner.
RAY_RECONNECT_LIMIT_S = 20
AWAY_S = RAY_RECONNECT_LIMIT_S + 10.0

SPEC = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 2
command: |
  python3 -m argus.examples.toy_trainer data.train_files=$HOME/datasets/toy/train.jsonl
  trainer.nnodes=1 trainer.n_gpus_per_node=2 trainer.total_training_steps={steps}
  +trainer.step_sleep_s={sleep}
""".replace("\n  trainer", " \\\n  trainer").replace("\n  +trainer", " \\\n  +trainer")


class Stack(msgspec.Struct, kw_only=True):
    proc: subprocess.Popen  # type: ignore[type-arg]
    data: Path
    url: str
    token: str
    console: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=f"{self.url}/api/v2", timeout=10,
                            headers={"Authorization": f"Bearer {self.token}"})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("outage") / "data"
    port = free_ports(1)[0]
    console = data.parent / "console.log"
    env = {**os.environ, "ARGUS_V2__SCHEDULER__RETRY_INTERVAL_S": "2",
           "ARGUS_V2__SCHEDULER__POLL_INTERVAL_S": "0.5",
           "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_RECONNECT_LIMIT_S)}
    with open(console, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "argus", "up", "--data-dir", str(data), "--port",
                                 str(port), "--gpus", "2"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "cluster ready" not in console.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, console.read_text()[-3000:]
            time.sleep(0.5)
        yield Stack(proc=proc, data=data, url=f"http://127.0.0.1:{port}", console=console,
                    token=(data / "admin.token").read_text().strip())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _head_watchdog_pid(stack: Stack) -> int:
    """``argus node head``, started by this stack's ``argus up``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            args = (stat.parent / "cmdline").read_bytes().split(b"\0")
            if ppid == stack.proc.pid and args[-3:-1] == [b"node", b"head"]:
                return int(stat.parent.name)
    raise AssertionError("no head watchdog under argus up")


def _gcs_pid(stack: Stack) -> int:
    """The head's GCS server: under the stack's Ray temp dir (named by its guardian)."""
    temp_dir = ""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().split(b"\0")
            if b"argus.guardian" in args and args[args.index(b"--parent") + 1] == str(stack.proc.pid).encode():
                temp_dir = args[args.index(b"--temp-dir") + 1].decode()
    assert temp_dir, "the stack's guardian names its Ray temp dir"
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            text = cmdline.read_bytes().decode(errors="replace")
            if "gcs_server" in text.split("\0")[0] and f"{temp_dir}/h/" in text:
                return int(cmdline.parent.name)
    raise AssertionError("no GCS server found under " + temp_dir)


def _task(c: httpx.Client, task_id: str) -> dict:  # type: ignore[type-arg]
    return c.get(f"/tasks/{task_id}").json()


def _wait(what: str, cond, timeout_s: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_head_killed_under_a_running_task(stack: Stack) -> None:
    errors: list[str] = []
    polls = [0]
    stop = threading.Event()

    def poll() -> None:  # what a user's dashboard does all along
        with stack.client() as c:
            while not stop.is_set():
                for path in (f"{stack.url}/readyz", f"{stack.url}/api/v2/tasks"):
                    try:
                        r = c.get(path)
                        if r.status_code >= 500:
                            errors.append(f"{path}: {r.status_code}")
                    except httpx.HTTPError as exc:
                        errors.append(f"{path}: {type(exc).__name__}: {exc}")
                polls[0] += 1
                time.sleep(0.5)

    with stack.client() as c:
        r = c.put("/files/datasets/toy/train.jsonl", content=b'{"prompt": "1+1=", "answer": "2"}\n')
        assert r.status_code == 201, r.text
        long = c.post("/tasks", content=SPEC.format(steps=400, sleep=0.2)).json()["task_id"]
        _wait("the long task to run", lambda: _task(c, long)["state"] == "RUNNING")
        short = c.post("/tasks", content=SPEC.format(steps=3, sleep=0)).json()["task_id"]
        _wait("the short task to wait", lambda: _task(c, short)["state"] == "PENDING_RESOURCES")

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        watchdog = _head_watchdog_pid(stack)
        os.kill(watchdog, signal.SIGSTOP)  # no new head until we say so
        try:
            os.kill(_gcs_pid(stack), signal.SIGKILL)
            killed_at = time.monotonic()
            while time.monotonic() - killed_at < AWAY_S:
                assert stack.proc.poll() is None, stack.console.read_text()[-4000:]
                assert _task(c, short)["state"] in ("QUEUED", "PENDING_RESOURCES")  # nothing admitted
                time.sleep(1.0)
        finally:
            os.kill(watchdog, signal.SIGCONT)  # it finds its Ray gone: argus up starts a new head

        # The interrupted attempt is CLUSTER_LOST and the task retried (a new attempt runs).
        def retried() -> bool:
            attempts = _task(c, long)["attempts"]
            return (len(attempts) >= 2 and attempts[0]["failure_kind"] == "CLUSTER_LOST"
                    and attempts[-1]["ray_status"] in ("RUNNING", "SUBMITTED", "SUCCEEDED"))
        _wait("the long task's retry", retried)
        assert c.post(f"/tasks/{long}/cancel").status_code == 200  # enough of it
        _wait("the waiting task to succeed", lambda: _task(c, short)["state"] == "SUCCEEDED")
        stop.set()
        poller.join(10)

    assert stack.proc.poll() is None, f"argus up exited:\n{stack.console.read_text()[-4000:]}"
    assert polls[0] > AWAY_S and not errors, errors[:10]  # two requests a poll, every 0.5 s
    # The console said so (each watchdog restarts its node by itself, out of its sight).
    assert "head: its Ray node exited" in stack.console.read_text(), stack.console.read_text()[-4000:]
    verify = subprocess.run([sys.executable, "-m", "argus", "replay", "--db", str(stack.data / "argus.sqlite3"),
                             "verify"], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
