"""A planned restart, as a user does it: a task runs on `argus up`, Ctrl-C, `argus up` again
on the same data. The stop says which task it stops and from which checkpoint it resumes;
the restart resumes it first, at once (INTERRUPTED, not CLUSTER_LOST after a back-off),
ahead of a smaller task that a user put in line meanwhile; the resumed attempt continues
from the checkpoint."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from argus.procs import free_ports
from tests.e2e.test_ray_outage import SPEC, _task, _wait

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def _up(data: Path, port: int, console: Path) -> subprocess.Popen[bytes]:
    # A retry back-off long enough to see that the resumed task does not wait for it.
    env = {**os.environ, "ARGUS_V2__SCHEDULER__RETRY_INTERVAL_S": "600", "ARGUS_V2__SCHEDULER__POLL_INTERVAL_S": "0.5"}
    with open(console, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "argus", "up", "--data-dir", str(data), "--port", str(port),
                                 "--gpus", "2"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 150
    try:
        while console.read_text().count("cluster ready") < 1 + console.read_text().count("stopped: this stack"):
            assert proc.poll() is None and time.monotonic() < deadline, console.read_text()[-3000:]
            time.sleep(0.5)
    except BaseException:  # never ready: stopped here, since the caller never gets it to stop
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_ctrl_c_and_up_again_resumes_the_running_task_first(tmp_path: Path) -> None:
    data, console, port = tmp_path / "data", tmp_path / "console.log", free_ports(1)[0]
    proc = _up(data, port, console)
    try:
        token = (data / "admin.token").read_text().strip()
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v2", timeout=10,
                         headers={"Authorization": f"Bearer {token}"})
        r = c.put("/files/datasets/toy/train.jsonl", content=b'{"prompt": "1+1=", "answer": "2"}\n')
        assert r.status_code == 201, r.text
        long_spec = SPEC.format(steps=400, sleep=0.3).replace("+trainer.step_sleep_s", "trainer.save_freq=2 \\\n  +trainer.step_sleep_s")
        long = c.post("/tasks", content=long_spec).json()["task_id"]
        _wait("a checkpoint of the long task", lambda: (_task(c, long)["attempts"] or [{}])[-1].get("checkpoint_step"))
        # The worker's keeper (node hygiene) found its node's id and looks after it.
        assert "keeper_start" in (data / "logs" / "worker.log").read_text()
        _stop(proc)
        said = console.read_text()
        assert "stopping 1 running task(s)" in said and long in said and "checkpoint of step" in said, said[-3000:]

        proc = _up(data, port, console)
        small = c.post("/tasks", content=SPEC.format(steps=3, sleep=0).replace("n_gpus_per_node: 2", "n_gpus_per_node: 1")
                       .replace("trainer.n_gpus_per_node=2", "trainer.n_gpus_per_node=1")).json()["task_id"]

        def resumed() -> bool:
            attempts = _task(c, long)["attempts"]
            return len(attempts) >= 2 and attempts[-1]["ray_status"] in ("RUNNING", "SUBMITTED")
        _wait("the long task's resume", resumed, timeout_s=120)  # within the 600 s back-off: at once
        first = _task(c, long)["attempts"][0]
        assert first["failure_kind"] == "INTERRUPTED" and "argus up was stopped" in first["evidence"], first
        _wait("the resumed attempt's log", lambda: "resumed from checkpoint" in c.get(
            f"/tasks/{long}/logs", params={"tail": 400}).text, timeout_s=60)
        assert c.post(f"/tasks/{long}/cancel").status_code == 200
        _wait("the small task", lambda: _task(c, small)["state"] == "SUCCEEDED")
    finally:
        _stop(proc)
