"""A user never reads another user's task id or user name (issue 36, governance): not in
their task's detail, the task list, the timeline, the queue or the event stream, though the
scheduler's messages about their task name the others. Admins read the messages whole."""

from __future__ import annotations

import asyncio
import json

from argus.api.redact import OTHER_TASK, OTHER_USER, Redactor
from argus.events import (
    AttemptPreempted, AttemptRunning, Demand, AttemptStarting, AttemptSubmitted, SubmissionPayload, TaskDeferred, task_stream,
)
from argus.store import AppendBatch
from tests.api.conftest import Env
from tests.api.test_sse import collect, submit

NEEDED = Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4.0)
BOBS = "bob-ppo-20261126-120000-beef"
WAIT = (f"needs 1 node × 4 GPUs (+1 CPUs each); fits now, but only on nodes reserved for {BOBS} (n01, n02): "
        f"it would run on them; making room: preempting {BOBS} (bob); 'bob' is over its fair share")


def test_the_forms_the_messages_use() -> None:
    hide = Redactor("alice", ["alice", "bob", "carol"])
    own = "alice-sft-20261126-120000-0a1b"
    assert hide.text(f"reserved for {own} and {BOBS}") == f"reserved for {own} and {OTHER_TASK}"
    assert hide.text("preempting x (bob); (carol, needs 4 GPUs); 'bob' over") == (
        f"preempting x ({OTHER_USER}); ({OTHER_USER}, needs 4 GPUs); '{OTHER_USER}' over")
    assert hide.text("bob") == OTHER_USER  # a field that is a name
    # The reader's own name, node ids and words that are no user's stay.
    assert hide.text("user 'alice' already runs 2 (n01, n02); bobby") == "user 'alice' already runs 2 (n01, n02); bobby"
    assert hide.value({"a": [BOBS, 3, None], "b": {"c": "(carol)"}}) == {
        "a": [OTHER_TASK, 3, None], "b": {"c": f"({OTHER_USER})"}}
    assert not hide.may_name_others("nothing here") and hide.may_name_others(BOBS)


async def _alice_task_naming_bob(env: Env) -> str:
    t = await submit(env, "alice")
    sid = f"{t}--a01"
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    await env.store.append_batches([AppendBatch(stream=task_stream(t), expected_version=1, owner="alice", events=[
        AttemptStarting(task_id=t, attempt_no=1, submission_id=sid, payload=payload, decided_at=1.0,
                        note=f"backfilled on nodes the reservation of {BOBS} does not need"),
        AttemptSubmitted(task_id=t, attempt_no=1, submission_id=sid, submitted_at=1.0),
        AttemptRunning(task_id=t, attempt_no=1, submission_id=sid, started_at=1.0, seen_at=1.0),
        AttemptPreempted(task_id=t, attempt_no=1, submission_id=sid, by_task_id=BOBS, by_user="bob",
                         reason="priority", message=f"preempted to make room for {BOBS} (bob, needs 4 GPUs)",
                         preempted_at=2.0)])])
    return t


async def test_task_detail_list_and_timeline(env: Env) -> None:
    t = await _alice_task_naming_bob(env)
    for path in (f"/api/v2/tasks/{t}", "/api/v2/tasks", f"/api/v2/tasks/{t}/timeline"):
        seen = (await env.client.get(path, headers=env.h("alice"))).text
        assert t in seen and "bob" not in seen, (path, seen)
        whole = (await env.client.get(path, headers=env.h("admin"))).text
        assert path.endswith("tasks") or BOBS in whole, (path, whole)  # (a list row has no messages)
    timeline = (await env.client.get(f"/api/v2/tasks/{t}/timeline", headers=env.h("alice"))).json()
    preempted = next(e["data"] for e in timeline if e["type"] == "AttemptPreempted")
    assert (preempted["by_task_id"], preempted["by_user"]) == (OTHER_TASK, OTHER_USER)


async def test_queue_and_event_stream(live: Env) -> None:
    t = await submit(live, "alice")
    await live.store.append(task_stream(t), None, [TaskDeferred(
        task_id=t, reason="behind_reservation", message=WAIT, needed=NEEDED, decided_at=1.0)], owner="alice")
    r = await live.client.get("/api/v2/queue", headers=live.h("alice"))
    mine = next(e for e in r.json()["items"] if e["task_id"] == t)
    assert mine["wait_message"] and "bob" not in json.dumps(mine) and "(n01, n02)" in mine["wait_message"]
    detail = (await live.client.get(f"/api/v2/tasks/{t}", headers=live.h("alice"))).json()
    assert "bob" not in detail["wait_message"] and OTHER_TASK in detail["wait_message"]
    # From the log (catch-up), as the stream resumes; and live.
    events = await collect(live.client, live.h("alice"), 50, params={"after": 0}, timeout=2.0, partial_ok=True)
    deferred = [e for e in events if e["event"] == "TaskDeferred"]
    assert len(deferred) == 1 and OTHER_USER in deferred[0]["data"]
    assert not [e for e in events if "bob" in e["data"]]
    admin = await collect(live.client, live.h("admin"), 50, params={"after": 0}, timeout=2.0, partial_ok=True)
    assert any(BOBS in e["data"] for e in admin)
    reader = asyncio.create_task(collect(live.client, live.h("alice"), 1))
    await asyncio.sleep(0.5)
    await live.store.append(task_stream(t), None, [TaskDeferred(
        task_id=t, reason="preempting", message=WAIT + " again", needed=NEEDED, decided_at=2.0)],
        owner="alice")
    live_events = await reader
    assert "bob" not in live_events[0]["data"] and "again" in live_events[0]["data"]
