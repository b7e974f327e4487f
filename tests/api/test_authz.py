"""Authorization matrix: every endpoint × {no token, bad token, other user, disabled
user, admin, owner}. Another user's task is 404 (ids do not leak), and no response to
another user holds the owner's data."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.support.sql import rows as sql_rows

# (method, path template, body) → expected status per caller. {t} = alice's task id.
OK, CREATED = 200, 201
ROWS: list[tuple[str, str, Any, dict[str, int]]] = [
    ("GET", "/api/v2/me", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/tasks", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/tasks?user=alice", None, {"alice": OK, "bob": 403, "admin": OK}),
    ("GET", "/api/v2/tasks/{t}", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("GET", "/api/v2/tasks/{t}/spec", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("GET", "/api/v2/tasks/{t}/timeline", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("GET", "/api/v2/tasks/{t}/logs", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("GET", "/api/v2/tasks/{t}/progress", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("POST", "/api/v2/tasks/{t}/cancel", None, {"alice": 409, "bob": 404, "admin": OK}),
    ("POST", "/api/v2/tasks", "spec", {"alice": CREATED, "bob": CREATED, "admin": CREATED}),
    ("POST", "/api/v2/tasks/validate", "spec", {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/queue", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/cluster", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/users", None, {"alice": 403, "bob": 403, "admin": OK}),
    ("POST", "/api/v2/users", {"user_id": "zed"}, {"alice": 403, "bob": 403, "admin": CREATED}),
    ("GET", "/api/v2/users/alice", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("POST", "/api/v2/users/alice/disable", None, {"alice": 403, "bob": 403, "admin": OK}),
    ("POST", "/api/v2/users/alice/enable", None, {"alice": 403, "bob": 403, "admin": OK}),
    ("GET", "/api/v2/users/alice/tokens", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("POST", "/api/v2/users/alice/tokens", {"label": "x"}, {"alice": CREATED, "bob": 404, "admin": CREATED}),
    ("DELETE", "/api/v2/users/alice/tokens/{tok}", None, {"alice": OK, "bob": 404, "admin": OK}),
    ("GET", "/api/v2/files", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/files/datasets", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("GET", "/api/v2/files/datasets/toy/train.jsonl", None, {"alice": OK, "bob": 404, "admin": 404}),
    ("PUT", "/api/v2/files/models/m.bin", b"abc", {"alice": CREATED, "bob": CREATED, "admin": CREATED}),
    ("DELETE", "/api/v2/files/models/m.bin", None, {"alice": OK, "bob": 404, "admin": 404}),
    ("GET", "/api/v2/files/common/datasets", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("PUT", "/api/v2/files/common/datasets/x", b"abc", {"alice": 403, "bob": 403, "admin": 201}),
    ("GET", "/api/v2/teams", None, {"alice": OK, "bob": OK, "admin": OK}),
    ("POST", "/api/v2/teams", {"team_id": "zt"}, {"alice": 403, "bob": 403, "admin": CREATED}),
    ("POST", "/api/v2/teams/zt/members", {"user_id": "bob"}, {"alice": 403, "bob": 403, "admin": 404}),
    ("POST", "/api/v2/teams/zt/quotas", {"nominal_gpus": 1}, {"alice": 403, "bob": 403, "admin": 404}),
    ("GET", "/api/v2/usage?by=user&since=2020-01-01", None, {"alice": OK, "bob": OK, "admin": OK}),
]


async def _call(env: Env, method: str, path: str, body: Any, who: str | None) -> Any:
    headers = env.h(who)
    kwargs: dict[str, Any] = {"headers": headers}
    if body == "spec":
        kwargs["content"] = ADVANCED
        headers["Content-Type"] = "application/yaml"
        put_dataset(env.shared, who if who in ("alice", "bob", "admin") else "alice")
    elif isinstance(body, bytes):
        kwargs["content"] = body
    elif body is not None:
        kwargs["json"] = body
    return await env.client.request(method, path, **kwargs)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]} {r[1]}" for r in ROWS])
async def test_matrix(env: Env, row: tuple[str, str, Any, dict[str, int]]) -> None:
    method, template, body, expected = row
    put_dataset(env.shared, "alice")
    (env.shared / "datasets").mkdir(parents=True, exist_ok=True)
    (env.shared / "users/alice/models").mkdir(parents=True, exist_ok=True)
    (env.shared / "users/alice/models/m.bin").write_bytes(b"weights")
    r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers=env.h("alice"))
    task_id = r.json()["task_id"]
    tokens = {}
    for who in ("alice", "bob", "admin"):
        r = await env.client.post("/api/v2/users/alice/tokens", json={"label": who},
                                  headers=env.h("admin"))
        tokens[who] = r.json()["token_id"]
    secret = env.tokens["alice"]

    for who in (None, "bad", "dave"):
        path = template.format(t=task_id, tok=tokens["alice"])
        r = await _call(env, method, path, body, who)
        want = 403 if who == "dave" else 401
        assert r.status_code == want, (who, path, r.text)
        assert task_id not in r.text and secret not in r.text
        assert r.json()["detail"]

    for who in ("bob", "admin", "alice"):
        path = template.format(t=task_id, tok=tokens[who])
        r = await _call(env, method, path, body, who)
        assert r.status_code == expected[who], (who, path, r.text)
        if who == "bob":
            assert task_id not in r.text, r.text
            assert secret not in r.text
            assert "alice" not in r.text or template.startswith("/api/v2/users"), r.text


async def test_disabled_user_refused_at_once(env: Env) -> None:
    h = env.h("alice")
    assert (await env.client.get("/api/v2/me", headers=h)).status_code == 200
    r = await env.client.post("/api/v2/users/alice/disable", headers=env.h("admin"))
    assert r.status_code == 200 and r.json()["disabled"] is True
    assert (await env.client.get("/api/v2/me", headers=h)).status_code == 403
    await env.client.post("/api/v2/users/alice/enable", headers=env.h("admin"))
    assert (await env.client.get("/api/v2/me", headers=h)).status_code == 200


async def test_revoked_token_refused_at_once(env: Env) -> None:
    r = await env.client.post("/api/v2/users/bob/tokens", json={"label": "ci"}, headers=env.h("bob"))
    token, token_id = r.json()["token"], r.json()["token_id"]
    h = {"Authorization": f"Bearer {token}"}
    assert (await env.client.get("/api/v2/me", headers=h)).status_code == 200
    r = await env.client.delete(f"/api/v2/users/bob/tokens/{token_id}", headers=env.h("bob"))
    assert r.status_code == 200 and r.json()["revoked"] is True
    assert (await env.client.get("/api/v2/me", headers=h)).status_code == 401
    rows = await sql_rows(env.store, "SELECT token_hash FROM tokens WHERE token_id = ?", (token_id,))
    assert rows[0][0] != token and len(rows[0][0]) == 64


async def test_admin_lists_all_user_lists_own(env: Env) -> None:
    for who in ("alice", "bob"):
        put_dataset(env.shared, who)
        r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers=env.h(who))
        assert r.status_code == 201
    mine = (await env.client.get("/api/v2/tasks", headers=env.h("bob"))).json()
    assert [t["user"] for t in mine["items"]] == ["bob"]
    everyone = (await env.client.get("/api/v2/tasks", headers=env.h("admin"))).json()
    assert sorted(t["user"] for t in everyone["items"]) == ["alice", "bob"]
    one = (await env.client.get("/api/v2/tasks?user=alice", headers=env.h("admin"))).json()
    assert [t["user"] for t in one["items"]] == ["alice"]
