"""What a user's tasks may ask for (issue 36, governance): the highest priority, whether
they may be ``preemptible: false``, how many may wait. Set by an admin; a spec beyond them
gets a 4xx that says the limit, and nothing is written; validation says the same."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import ADVANCED, Env, put_dataset


def spec(**fields: object) -> str:
    return ADVANCED + "".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in fields.items())


async def submit(env: Env, who: str, **fields: object) -> Any:
    return await env.client.post("/api/v2/tasks", headers=env.h(who), content=spec(**fields))


async def positions(env: Env) -> int:
    return int(await env.store.read_snapshot(lambda db: db.execute("SELECT max(position) FROM events").fetchone()[0]))


async def test_defaults_priority_0_and_preemptible(env: Env) -> None:
    put_dataset(env.shared, "alice")
    before = await positions(env)
    r = await submit(env, "alice", priority=1000000)
    assert r.status_code == 403, r.text
    assert "priority 1000000 is above your limit of 0" in r.json()["detail"]
    assert "argus users set alice --max-priority" in r.json()["detail"]
    r = await submit(env, "alice", preemptible=False)
    assert r.status_code == 403 and "preemptible: false is not allowed" in r.json()["detail"]
    assert await positions(env) == before, "a refused spec writes nothing"
    # Validation answers the same, without writing.
    r = await env.client.post("/api/v2/tasks/validate", headers=env.h("alice"), content=spec(priority=5))
    assert r.status_code == 200 and r.json()["ok"] is False
    assert r.json()["errors"][0]["field"] == "priority" and "limit of 0" in r.json()["errors"][0]["message"]
    # A spec that does not say is preemptible; a lower priority is always allowed.
    r = await submit(env, "alice", priority=-5)
    assert r.status_code == 201, r.text
    task = (await env.client.get(f"/api/v2/tasks/{r.json()['task_id']}", headers=env.h("alice"))).json()
    assert task["preemptible"] is True and task["priority"] == -5


async def test_an_admin_raises_the_limits_and_they_hold_at_once(env: Env) -> None:
    put_dataset(env.shared, "bob")
    r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("alice"),
                              json={"max_priority": 10})
    assert r.status_code == 403, "only admins set limits"
    r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("admin"),
                              json={"max_priority": 10, "may_pin": True, "max_queued": 2})
    assert r.status_code == 200, r.text
    assert (r.json()["max_priority"], r.json()["may_pin"], r.json()["max_queued"]) == (10, True, 2)
    r = await submit(env, "bob", priority=10, preemptible=False)
    assert r.status_code == 201, r.text
    task = (await env.client.get(f"/api/v2/tasks/{r.json()['task_id']}", headers=env.h("bob"))).json()
    assert task["preemptible"] is False and task["priority"] == 10
    r = await submit(env, "bob", priority=11)
    assert r.status_code == 403 and "limit of 10" in r.json()["detail"]
    # A user who may pin gets non-preemptible tasks by default, as before there were limits.
    r = await submit(env, "bob")
    assert r.status_code == 201
    task = (await env.client.get(f"/api/v2/tasks/{r.json()['task_id']}", headers=env.h("bob"))).json()
    assert task["preemptible"] is False
    # Two wait (nothing runs here): the third is refused until one starts or is canceled.
    before = await positions(env)
    r = await submit(env, "bob")
    assert r.status_code == 409 and "your cap is 2" in r.json()["detail"], r.text
    assert await positions(env) == before
    r = await env.client.post(f"/api/v2/tasks/{task['task_id']}/cancel", headers=env.h("bob"))
    assert r.status_code in (200, 202), r.text
    assert (await submit(env, "bob")).status_code == 201
    users = (await env.client.get("/api/v2/users", headers=env.h("admin"))).json()
    assert {u["user_id"]: u["max_priority"] for u in users}["bob"] == 10


async def test_bad_limits_are_refused_and_unknown_users_are_404(env: Env) -> None:
    for body in ({"max_priority": "high"}, {"max_queued": -1}, {"max_priority": 10**7}, {"surprise": 1},
                 {"max_gpus": -1}, {"max_gpus": "all"}):
        r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("admin"), json=body)
        assert r.status_code == 400, (body, r.text)
    r = await env.client.post("/api/v2/users/nobody/limits", headers=env.h("admin"), json={"max_priority": 1})
    assert r.status_code == 404


async def test_admins_are_not_limited(env: Env) -> None:
    put_dataset(env.shared, "admin")
    r = await submit(env, "admin", priority=1000, preemptible=False)
    assert r.status_code == 201, r.text


async def test_a_gpu_cap_is_shown_and_a_gang_above_it_is_refused_with_the_cap(env: Env) -> None:
    put_dataset(env.shared, "bob")
    r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("admin"), json={"max_gpus": 0.5})
    assert r.status_code == 200 and r.json()["max_gpus"] == 0.5, r.text
    users = (await env.client.get("/api/v2/users", headers=env.h("admin"))).json()
    assert {u["user_id"]: u["max_gpus"] for u in users}["bob"] == 0.5
    before = await positions(env)
    r = await submit(env, "bob")  # one GPU: a gang that could never start under the cap
    assert r.status_code == 403 and "needs 1 GPUs, above your cap of 0.5" in r.json()["detail"], r.text
    assert await positions(env) == before, "a refused spec writes nothing"
    r = await env.client.post("/api/v2/tasks/validate", headers=env.h("bob"), content=spec())
    assert r.json()["ok"] is False and r.json()["errors"][0]["field"] == "resources"
    r = await env.client.post("/api/v2/users/bob/limits", headers=env.h("admin"), json={"max_gpus": 1})
    assert (await submit(env, "bob")).status_code == 201
