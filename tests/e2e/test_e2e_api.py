"""End to end on a real local stack (API + reactor + a private Ray cluster): the example
advanced task submitted through HTTP and through the CLI, followed over SSE until it
succeeds, its logs read, and an SSE client resumed with Last-Event-ID."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from click.testing import CliRunner

import argus
from argus.cli import main
from tests.support.stack import Stack

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLE = Path(argus.__file__).parent / "examples" / "example_advanced.yaml"
TIMEOUT_S = 240.0
TRAIN = b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "4"}\n'


@pytest.fixture(scope="module")
def stack(argus_stack: Stack) -> Stack:
    if not argus_stack.reactor:
        pytest.skip("argus.reactor is not importable yet: tasks cannot run")
    return argus_stack


def sse(client: httpx.Client, headers: dict[str, str], params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    with client.stream("GET", "/api/v2/events", headers=headers, params=params,
                       timeout=httpx.Timeout(15, read=60)) as r:
        assert r.status_code == 200
        event: dict[str, str] = {}
        for line in r.iter_lines():
            if line == "":
                if "data" in event:
                    yield {"id": int(event["id"]), "type": event["event"], **json.loads(event["data"])}
                event = {}
            elif not line.startswith(":"):
                k, _, v = line.partition(":")
                event[k] = v[1:] if v.startswith(" ") else v


def follow_until_end(client: httpx.Client, headers: dict[str, str], task_id: str,
                     after: int = 0) -> list[dict[str, Any]]:
    seen = []
    deadline = time.monotonic() + TIMEOUT_S
    for ev in sse(client, headers, {"after": after}):
        if ev["stream"] == f"task-{task_id}":
            seen.append(ev)
            if ev["type"] in ("TaskSucceeded", "TaskFailed", "TaskCanceled"):
                return seen
        assert time.monotonic() < deadline, f"task {task_id} did not end: {seen}"
    raise AssertionError("stream ended")


def test_http_submit_follow_logs(stack: Stack) -> None:
    with stack.client("alice") as c:
        r = c.put("/api/v2/files/datasets/toy/train.jsonl", content=TRAIN)
        assert r.status_code == 201, r.text
        r = c.post("/api/v2/tasks", content=EXAMPLE.read_bytes(),
                   headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        task_id = r.json()["task_id"]
        events = follow_until_end(c, {}, task_id)
        types = [e["type"] for e in events]
        assert types[0] == "TaskSubmitted" and types[-1] == "TaskSucceeded", types
        assert "AttemptStarting" in types and "AttemptSubmitted" in types
        detail = c.get(f"/api/v2/tasks/{task_id}").json()
        assert detail["state"] == "SUCCEEDED" and detail["attempts"][0]["exit_code"] in (0, None)
        logs = c.get(f"/api/v2/tasks/{task_id}/logs", params={"tail": 1000}).text
        assert "step:" in logs, logs
        progress = c.get(f"/api/v2/tasks/{task_id}/progress").json()
        assert progress["last_step"] == 5, progress
        timeline = c.get(f"/api/v2/tasks/{task_id}/timeline").json()
        assert [e["type"] for e in timeline] == types
    with stack.client("bob") as c:
        assert c.get(f"/api/v2/tasks/{task_id}/logs").status_code == 404


def test_cli_submit_and_resume(stack: Stack) -> None:
    env = {"ARGUS_URL": stack.url, "ARGUS_TOKEN": stack.tokens["alice"], "XDG_CONFIG_HOME": "/nonexistent"}
    with stack.client("alice") as c:
        c.put("/api/v2/files/datasets/toy/train.jsonl", content=TRAIN)
        head = stack_head(c)
        r = CliRunner().invoke(main, ["submit", str(EXAMPLE)], env=env)
        assert r.exit_code == 0, r.output
        task_id = r.output.strip().splitlines()[0]
        # Read the first two of the task's events, then drop the connection.
        got: list[dict[str, Any]] = []
        for ev in sse(c, {}, {"after": head}):
            got.append(ev)
            if len(got) == 2:
                break
        last = got[-1]["id"]
        r = CliRunner().invoke(main, ["watch", task_id], env=env)
        assert r.exit_code == 0 and "succeeded with attempt 1" in r.output, r.output
        # Resume: exactly the events alice may see after `last`, each once, in order.
        # (alice's only events since `head` are this task's: its timeline)
        timeline = c.get(f"/api/v2/tasks/{task_id}/timeline").json()
        want = [e["position"] for e in timeline if e["position"] > last]
        resumed = []
        for ev in sse(c, {"Last-Event-ID": str(last)}, {}):
            resumed.append(ev["id"])
            if ev["id"] >= want[-1]:
                break
        assert resumed == want
        r = CliRunner().invoke(main, ["logs", task_id], env=env)
        assert r.exit_code == 0 and "step:" in r.output


def stack_head(c: httpx.Client) -> int:
    text = c.get("/metrics").text
    line = next(l for l in text.splitlines() if l.startswith("argus_log_position "))
    return int(float(line.split()[1]))
