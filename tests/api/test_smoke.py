"""The main flows through the API, in-process."""

from __future__ import annotations

from tests.api.conftest import ADVANCED, Env, put_dataset


async def test_submit_show_list_cancel(env: Env) -> None:
    put_dataset(env.shared, "alice")
    c, h = env.client, env.h("alice")
    r = await c.post("/api/v2/tasks", content=ADVANCED, headers={**h, "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    assert task_id.startswith("alice-ppo-") and r.json()["state"] == "QUEUED"
    r = await c.get(f"/api/v2/tasks/{task_id}", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "QUEUED" and body["queue_position"] == 1
    r = await c.get("/api/v2/tasks", headers=h)
    assert r.json()["total"] == 1 and r.json()["items"][0]["task_id"] == task_id
    r = await c.get(f"/api/v2/tasks/{task_id}/spec", headers=h)
    assert "$HOME/datasets" in r.json()["command_raw"]
    assert str(env.shared / "users/alice/datasets") in r.json()["command"]
    r = await c.get("/api/v2/queue", headers=env.h("bob"))
    assert r.json()["items"][0]["task_id"] is None and r.json()["total"] == 1
    r = await c.post(f"/api/v2/tasks/{task_id}/cancel", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "CANCELED", r.text
    r = await c.get(f"/api/v2/tasks/{task_id}/timeline", headers=h)
    assert [e["type"] for e in r.json()] == ["TaskSubmitted", "TaskCancelRequested", "TaskCanceled"]
    r = await c.post(f"/api/v2/tasks/{task_id}/cancel", headers=h)
    assert r.status_code == 409


async def test_submit_json_forms(env: Env) -> None:
    put_dataset(env.shared, "alice")
    h = env.h("alice")
    r = await env.client.post("/api/v2/tasks", json={"spec": ADVANCED}, headers=h)
    assert r.status_code == 201, r.text
    import yaml

    r = await env.client.post("/api/v2/tasks", json=yaml.safe_load(ADVANCED), headers=h)
    assert r.status_code == 201, r.text


async def test_ops_endpoints(env: Env) -> None:
    assert (await env.client.get("/healthz")).status_code == 200
    assert (await env.client.get("/readyz")).status_code == 200
    r = await env.client.get("/metrics")
    assert "argus_queue_depth" in r.text and "argus_append_seconds" in r.text
    r = await env.client.get("/schema/openapi.json")
    assert r.json()["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    r = await env.client.get("/")
    assert r.status_code == 200


async def test_login_cookie(env: Env) -> None:
    c = env.client
    r = await c.post("/api/v2/auth/login", json={"token": env.tokens["alice"]})
    assert r.status_code == 200 and r.json()["user_id"] == "alice"
    assert "httponly" in r.headers["set-cookie"].lower()
    r = await c.get("/api/v2/me")
    assert r.status_code == 200 and r.json()["user_id"] == "alice"
    await c.post("/api/v2/auth/logout")
    c.cookies.clear()
    assert (await c.get("/api/v2/me")).status_code == 401
    r = await c.post("/api/v2/auth/login", json={"token": env.tokens["dave"]})
    assert r.status_code == 403
