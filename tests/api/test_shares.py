"""GET /shares: each user's standing under fair share, from the log's projections. Alice
ran 4 GPUs for two hours that ended an hour ago and runs 4 more now; bob waits. Users
see their own row, admins every row."""

from __future__ import annotations

import math
import time

import pytest

from argus.events import cluster_stream, task_stream
from argus.store import AppendBatch
from tests.api.conftest import Env
from tests.events import factories as f

HALF_LIFE = 7 * 24 * 3600.0


async def test_each_user_sees_its_share_usage_and_holdings(env: Env) -> None:
    now = time.time()
    done, live, waits = "alice-ppo-20260101-000001-done", "alice-ppo-20260101-000002-live", "bob-ppo-20260101-000003-wait"
    await env.store.append_batches([
        AppendBatch(stream=cluster_stream, expected_version=None, events=[f.capacity({"n0": 0.0, "n1": 8.0}, at=now)]),
        AppendBatch(stream=task_stream(done), expected_version=0, owner="alice", events=[
            f.submitted(done, at=now - 3 * 3600), f.starting(done, at=now - 3 * 3600),
            f.attempt_submitted(done, at=now - 3 * 3600), f.running(done, at=now - 3 * 3600),
            f.ended(done, at=now - 3600), f.succeeded(done, at=now - 3600)]),
        AppendBatch(stream=task_stream(live), expected_version=0, owner="alice", events=[
            f.submitted(live, at=now - 600), f.starting(live, at=now - 600),
            f.attempt_submitted(live, at=now - 600), f.running(live, at=now - 600)]),
        AppendBatch(stream=task_stream(waits), expected_version=0, owner="bob",
                    events=[f.submitted(waits, "bob", at=now)]),
    ])
    admin = (await env.client.get("/api/v2/shares", headers=env.h("admin"))).json()
    assert admin["total_gpus"] == 16 and admin["half_life_s"] == HALF_LIFE
    rows = {u["user"]: u for u in admin["users"]}
    assert set(rows) == {"alice", "bob"}
    alice, bob = rows["alice"], rows["bob"]
    assert (alice["held_gpus"], alice["running_tasks"], alice["waiting_tasks"]) == (4, 1, 0)
    assert (bob["held_gpus"], bob["running_tasks"], bob["waiting_tasks"]) == (0, 0, 1)
    assert alice["fair_gpus"] == bob["fair_gpus"] == 8  # two users with work, equal shares
    # 8 GPU-hours ended ~1-3 h ago and 0.67 GPU-hours in the last 10 min, barely decayed
    assert alice["usage_gpu_hours"] == pytest.approx(8 * math.exp2(-2 * 3600 / HALF_LIFE) + 4 * 600 / 3600, rel=0.02)
    assert bob["usage_gpu_hours"] == 0
    mine = (await env.client.get("/api/v2/shares", headers=env.h("bob"))).json()
    assert [u["user"] for u in mine["users"]] == ["bob"]
    assert (await env.client.get("/api/v2/shares")).status_code == 401
