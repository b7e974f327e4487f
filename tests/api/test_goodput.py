"""Goodput in the API: a task's own (``GET /tasks/{id}``), per user and for the cluster
(``GET /goodput``), and in ``/metrics``; finished tasks' summed per user by the
``goodput_sums`` projection (tests/projections/test_inline_equals_rebuild.py checks it
against a rebuild)."""

from __future__ import annotations

import pytest

from argus.events import EventMeta, task_stream
from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.events import factories as f
from tests.projections.test_goodput import stalled_then_resumed


async def _submit(env: Env, user: str) -> tuple[str, float]:
    put_dataset(env.shared, user)
    r = await env.client.post("/api/v2/tasks", headers=env.h(user), content=ADVANCED)
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    detail = (await env.client.get(f"/api/v2/tasks/{task_id}", headers=env.h(user))).json()
    return task_id, detail["created_at"]


async def _record(env: Env, task_id: str, user: str, events: list) -> None:  # type: ignore[type-arg]
    await env.store.append(task_stream(task_id), None, events, owner=user, meta=EventMeta(actor="reactor:test"))


async def test_goodput_of_a_stalled_and_resumed_task_in_show_goodput_and_metrics(env: Env) -> None:
    stalled, created = await _submit(env, "alice")
    # Resumed from its checkpoint at step 2: step 3 is trained again, and 105 s stalled.
    await _record(env, stalled, "alice", stalled_then_resumed(2, 62, task=stalled, base=created)[1:])
    running, began = await _submit(env, "bob")
    await _record(env, running, "bob", [f.starting(running, 1, began), f.running(running, 1, began + 1)])

    g = (await env.client.get(f"/api/v2/tasks/{stalled}", headers=env.h("alice"))).json()["goodput"]
    assert g["held"] == pytest.approx(245.0)  # one GPU
    assert g["stalled"] == pytest.approx(105.0) and g["lost"] == pytest.approx(8.0) and g["lost_steps"] == 1
    assert g["productive"] == pytest.approx(72.0) and g["ratio"] == pytest.approx(72 / 245)

    mine = (await env.client.get("/api/v2/goodput", headers=env.h("alice"))).json()
    assert [u["user"] for u in mine["users"]] == ["alice"]  # a user sees their own row...
    assert mine["users"][0]["goodput"]["held"] == pytest.approx(245.0)
    assert mine["cluster"]["tasks"] == 2  # ... and the cluster's sum
    assert mine["cluster"]["goodput"]["held"] > 245.0  # bob's running attempt, up to now
    every = (await env.client.get("/api/v2/goodput", headers=env.h("admin"))).json()
    assert [u["user"] for u in every["users"]] == ["alice", "bob"]

    text = (await env.client.get("/metrics")).text
    assert 'argus_gpu_seconds_held_total{user="alice"} 245.0' in text
    assert 'argus_gpu_seconds{category="stalled",user="alice"} 105.0' in text
    assert 'argus_gpu_seconds{category="lost",user="alice"}' in text
    assert 'argus_goodput_ratio{user="bob"} 0.0' in text  # running, no step yet
    assert "argus_cluster_goodput_ratio " in text and 'argus_task_wait_seconds_total{user="alice"} 20.0' in text

    kept = await env.store.read_snapshot(lambda db: db.execute(
        "SELECT user, tasks, held, stalled, lost_steps FROM goodput_sums").fetchall())
    assert kept == [("alice", 1, 245_000, 105_000, 1)]  # GPU-ms; bob's running task is added when read
