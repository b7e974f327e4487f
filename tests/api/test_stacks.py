"""``GET /tasks/{id}/stacks``: a stalled attempt's Python stacks, dumped by its driver,
served to its owner from the control plane's folder; a 404 that says why otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

from argus.events import EventMeta, task_stream
from argus.nodepool.stacks import capture_stacks
from argus.rayjobs.submission import submission_id_for
from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.events import factories as f


async def _stalled_task(env: Env) -> str:
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED)
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    version = len(await env.store.read_stream(task_stream(task_id)))
    await env.store.append(task_stream(task_id), version, [
        f.starting(task_id), f.attempt_submitted(task_id), f.running(task_id), f.stalled(task_id)],
        owner="alice", meta=EventMeta(actor="reactor:test"))
    return task_id


async def test_the_owner_reads_the_stacks_others_get_a_404(env: Env) -> None:
    task_id = await _stalled_task(env)
    url = f"/api/v2/tasks/{task_id}/stacks"
    r = await env.client.get(url, headers=env.h("alice"))
    assert r.status_code == 404 and "stall watchdog" in r.json()["detail"], r.text  # not taken yet
    sid = submission_id_for(task_id, 1)
    code = "import time\ndef wait_here():\n    print('up', flush=True)\n    time.sleep(600)\nwait_here()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "ARGUS_SUBMISSION_ID": sid},
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        summary = capture_stacks(str(env.shared), sid)
    finally:
        proc.kill()
        proc.wait()
    version = len(await env.store.read_stream(task_stream(task_id)))
    await env.store.append(task_stream(task_id), version, [f.stacks_captured(task_id)], owner="alice",
                           meta=EventMeta(actor="reactor:test"))
    r = await env.client.get(url, headers=env.h("alice"))
    assert r.status_code == 200 and "wait_here" in r.text and r.headers["content-type"].startswith("text/plain"), r.text
    assert summary.processes and summary.processes[0].top_frame.startswith("wait_here")
    assert (await env.client.get(url, headers=env.h("bob"))).status_code == 404  # not bob's task
    r = await env.client.get(url, params={"attempt": 2}, headers=env.h("alice"))
    assert r.status_code == 404 and "no attempt 2" in r.json()["detail"], r.text
    detail = (await env.client.get(f"/api/v2/tasks/{task_id}", headers=env.h("alice"))).json()
    assert detail["attempts"][0]["stacks_processes"] == 1
