"""The event stream over a real socket: filtering, resume with Last-Event-ID, heartbeats."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import httpx

from tests.api.conftest import ADVANCED, Env, put_dataset


async def sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Parse an SSE response into dicts (comments as {"comment": ...})."""
    event: dict[str, Any] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if event:
                yield event
            event = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            key, _, value = line.partition(":")
            event[key] = value[1:] if value.startswith(" ") else value


async def collect(client: httpx.AsyncClient, headers: dict[str, str], n: int,
                  params: dict[str, Any] | None = None, timeout: float = 5.0,
                  comments: list[str] | None = None, partial_ok: bool = False
                  ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    async def run() -> None:
        async with client.stream("GET", "/api/v2/events", headers=headers, params=params) as r:
            assert r.status_code == 200, await r.aread()
            async for ev in sse_events(r):
                if "comment" in ev:
                    if comments is not None:
                        comments.append(ev["comment"])
                    continue
                if "data" not in ev:  # the retry: field
                    continue
                out.append(ev)
                if len(out) >= n:
                    return

    try:
        await asyncio.wait_for(run(), timeout)
    except asyncio.TimeoutError:
        if partial_ok:
            return out
        raise
    return out


async def submit(env: Env, who: str) -> str:
    put_dataset(env.shared, who)
    r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers=env.h(who))
    assert r.status_code == 201, r.text
    return r.json()["task_id"]  # type: ignore[no-any-return]


async def test_filtered_history(live: Env) -> None:
    a = await submit(live, "alice")
    await submit(live, "bob")
    # alice sees her user events and her task, nothing of bob's
    got = await collect(live.client, live.h("alice"), 100, {"after": 0}, timeout=1.5,
                        partial_ok=True)

    owners = {json.loads(e["data"])["owner"] for e in got}
    assert owners == {"alice"}, owners
    assert any(e["event"] == "TaskSubmitted" and a in e["data"] for e in got)
    assert all("bob" not in e["data"] for e in got)
    ids = [int(e["id"]) for e in got]
    assert ids == sorted(ids)


async def test_resume_with_last_event_id(live: Env) -> None:
    h = live.h("alice")
    first = await submit(live, "alice")
    seen = await collect(live.client, h, 1, {"after": 0})
    head = await live.store.head_position()
    # Everything alice can see, from the start:
    all_mine = [r.position for r in await live.store.read(0, 10_000, owner="alice")]
    last = int(seen[0]["id"])
    # Missed while disconnected: two more tasks of alice (and one of bob, not hers).
    t2 = await submit(live, "alice")
    await submit(live, "bob")
    t3 = await submit(live, "alice")
    missed = [r.position for r in await live.store.read(last, 10_000, owner="alice")]
    got = await collect(live.client, {**h, "Last-Event-ID": str(last)}, len(missed))
    assert [int(e["id"]) for e in got] == missed
    assert t2 in got[-2]["data"] or t2 in "".join(e["data"] for e in got)
    assert t3 in got[-1]["data"]
    assert first and head and all_mine


async def test_live_delivery_and_heartbeat(live: Env) -> None:
    comments: list[str] = []
    # The admin sees every event: on a loaded host the fixture's last seeding events (a user
    # disabled) may still be on their way to the stream when it opens, and come first.
    task: asyncio.Task[list[dict[str, Any]]] = asyncio.create_task(
        collect(live.client, live.h("admin"), 4, None, timeout=5, comments=comments, partial_ok=True))
    await asyncio.sleep(1.2)  # heartbeat_s = 0.5 in the fixture
    t = await submit(live, "bob")
    got = await task
    submitted = [e for e in got if e["event"] == "TaskSubmitted"]
    assert len(submitted) == 1 and t in submitted[0]["data"], got
    assert all(e["event"] in ("TaskSubmitted", "UserDisabled", "TokenIssued", "UserCreated") for e in got), got
    assert "heartbeat" in comments


async def test_events_auth(live: Env) -> None:
    r = await live.client.get("/api/v2/events")
    assert r.status_code == 401
    r = await live.client.get("/api/v2/events", headers=live.h("dave"))
    assert r.status_code == 403
    r = await live.client.get("/api/v2/events", headers={**live.h("alice"), "Last-Event-ID": "x"})
    assert r.status_code == 400


async def follow_log(live: Env, url: str, lines: list[str]) -> None:
    """Collect alice's followed log lines into ``lines`` until the stream's ``end``."""
    async with live.client.stream("GET", url, headers=live.h("alice")) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for ev in sse_events(resp):
            if ev.get("event") == "log":
                lines.append(ev["data"])
            if ev.get("event") == "end":
                return


async def test_log_follow(live: Env) -> None:
    """Logs of an attempt: tail and follow (attempt recorded by hand, no reactor)."""
    from argus.events import AttemptStarting, SubmissionPayload, TaskCanceled, task_stream
    from argus.store import AppendBatch

    t = await submit(live, "alice")
    sid = f"{t}--a01"
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    await live.store.append_batches([AppendBatch(stream=task_stream(t), expected_version=1, owner="alice",
        events=[AttemptStarting(task_id=t, attempt_no=1, submission_id=sid, payload=payload, decided_at=0)])])
    jd = live.shared / "users/alice/jobs" / sid
    jd.mkdir(parents=True)
    (jd / "driver.log").write_text("hello\nstep:1 - loss:0.5 - acc:0.1\n")
    r = await live.client.get(f"/api/v2/tasks/{t}/logs?tail=1", headers=live.h("alice"))
    assert r.text == "step:1 - loss:0.5 - acc:0.1\n"
    r = await live.client.get(f"/api/v2/tasks/{t}/progress", headers=live.h("alice"))
    assert r.json()["points"] == [{"step": 1, "metrics": {"loss": 0.5, "acc": 0.1}}]
    lines: list[str] = []
    task = asyncio.create_task(follow_log(live, f"/api/v2/tasks/{t}/logs?follow=true&tail=5", lines))
    await asyncio.sleep(0.3)
    with open(jd / "driver.log", "a") as f:
        f.write("step:2 - loss:0.25\n")
    await live.store.append(task_stream(t), None, [TaskCanceled(task_id=t, by="x", canceled_at=0)],
                            owner="alice")
    await asyncio.wait_for(task, 6)
    assert lines == ["hello", "step:1 - loss:0.5 - acc:0.1", "step:2 - loss:0.25"]
    r = await live.client.get(f"/api/v2/tasks/{t}/logs?tail=1", headers=live.h("alice"))
    assert r.headers["content-type"].startswith("text/plain")
    lines = []  # the task has ended: following gives the tail, then the end, as a stream
    await asyncio.wait_for(follow_log(live, f"/api/v2/tasks/{t}/logs?follow=true&tail=1", lines), 6)
    assert lines == ["step:2 - loss:0.25"]


async def test_log_follow_of_an_earlier_attempt_stays_on_that_attempt(live: Env) -> None:
    """``?attempt=1&follow=true`` while attempt 2 exists: attempt 1's log, not the latest."""
    from argus.events import FailureKind, TaskCanceled, task_stream
    from tests.events import factories as f

    t = await submit(live, "alice")
    await live.store.append(task_stream(t), 1, [
        f.starting(t, 1), f.attempt_submitted(t, 1), f.running(t, 1),
        f.ended(t, 1, "LOST", failure_kind=FailureKind.CLUSTER_LOST), f.retry(t), f.starting(t, 2),
    ], owner="alice")
    for n in (1, 2):
        jd = live.shared / "users/alice/jobs" / f"{t}--a0{n}"
        jd.mkdir(parents=True)
        (jd / "driver.log").write_text(f"attempt {n}\n")
    lines: list[str] = []
    task = asyncio.create_task(follow_log(live, f"/api/v2/tasks/{t}/logs?follow=true&attempt=1", lines))
    await asyncio.sleep(0.3)
    await live.store.append(task_stream(t), None, [TaskCanceled(task_id=t, by="x", canceled_at=0)],
                            owner="alice")
    await asyncio.wait_for(task, 6)
    assert lines == ["attempt 1"]
