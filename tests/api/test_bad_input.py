"""Bad input gets a 4xx with a message, and the log holds no event from the request."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import ADVANCED, Env, put_dataset

BAD_SUBMISSIONS: list[tuple[str, dict[str, Any], int]] = [
    ("malformed yaml", {"content": "kind: advanced\n  nnodes: [1,\n", "headers": {"Content-Type": "application/yaml"}}, 400),
    ("yaml list", {"content": "- 1\n- 2\n", "headers": {"Content-Type": "application/yaml"}}, 400),
    ("empty", {"content": "", "headers": {"Content-Type": "application/yaml"}}, 400),
    ("wrong type", {"content": ADVANCED.replace("nnodes: 1", "nnodes: two")}, 400),
    ("negative gpus", {"content": ADVANCED.replace("n_gpus_per_node: 1", "n_gpus_per_node: -1")}, 400),
    ("unknown workload", {"content": ADVANCED.replace("workload: ppo", "workload: dance")}, 400),
    ("bad json", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400),
    ("json number", {"json": 42}, 400),
    ("json spec wrong type", {"json": {"spec": 42}}, 400),
    ("not utf8", {"content": b"\xff\xfe\xfa", "headers": {"Content-Type": "text/plain"}}, 400),
    ("traversal in data", {"content": ADVANCED.replace("$HOME/datasets/toy", "$HOME/../bob/datasets")}, 400),
    ("other user's home", {"content": ADVANCED.replace("$HOME/datasets/toy/train.jsonl", "/tmp/x.jsonl")}, 400),
    ("oversized", {"content": "kind: advanced\n" + "#" * 2_000_000}, 413),
    ("json nested 1000 deep", {"content": b'{"spec": ' + b"[" * 1000 + b"]" * 1000 + b"}",
                               "headers": {"Content-Type": "application/json"}}, 400),
    ("json object nested 1000 deep", {"content": b'{"a": ' * 1000 + b"1" + b"}" * 1000,
                                      "headers": {"Content-Type": "application/json"}}, 400),
    ("json text nested 1000 deep", {"content": "[" * 1000 + "]" * 1000}, 400),
    ("yaml nested 1000 deep", {"content": ADVANCED + "env: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n"}, 400),
    ("duplicate yaml key", {"content": ADVANCED + "workload: ppo\n"}, 400),
]


@pytest.mark.parametrize("case", BAD_SUBMISSIONS, ids=[c[0] for c in BAD_SUBMISSIONS])
async def test_bad_submission(env: Env, case: tuple[str, dict[str, Any], int]) -> None:
    _, kwargs, status = case
    put_dataset(env.shared, "alice")
    before = await env.store.head_position()
    headers = {**env.h("alice"), **kwargs.pop("headers", {})}
    r = await env.client.post("/api/v2/tasks", headers=headers, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["detail"], r.text
    assert await env.store.head_position() == before


async def test_validate_reports_field(env: Env) -> None:
    r = await env.client.post("/api/v2/tasks/validate", headers=env.h("alice"),
                              content=ADVANCED.replace("nnodes: 1", "nnodes: 0"))
    assert r.status_code == 200 and r.json()["ok"] is False
    assert r.json()["errors"][0]["field"] == "nnodes"


@pytest.mark.parametrize("path", [
    "/api/v2/tasks/nope-ppo-20250101-000000-abcd",
    "/api/v2/tasks/nope/spec",
    "/api/v2/tasks/nope/logs",
    "/api/v2/tasks/nope/timeline",
    "/api/v2/tasks/nope/progress",
    "/api/v2/users/nobody",
])
async def test_unknown_ids(env: Env, path: str) -> None:
    r = await env.client.get(path, headers=env.h("admin"))
    assert r.status_code == 404 and r.json()["detail"]


async def test_cancel_unknown_writes_nothing(env: Env) -> None:
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks/nope/cancel", headers=env.h("alice"))
    assert r.status_code == 404
    assert await env.store.head_position() == before


@pytest.mark.parametrize("req", [
    ("POST", "/api/v2/users", {"user_id": "Bad Name!"}, 400),
    ("POST", "/api/v2/users", {"user_id": "alice"}, 409),
    ("POST", "/api/v2/users", {"user_id": 5}, 400),
    ("POST", "/api/v2/users", {"user_id": "x", "extra": 1}, 400),
    ("POST", "/api/v2/users/admin/disable", None, 409),
    ("POST", "/api/v2/users/nobody/disable", None, 404),
    ("POST", "/api/v2/users/nobody/tokens", {"label": "x"}, 404),
    ("DELETE", "/api/v2/users/alice/tokens/tok-nope", None, 404),
    ("GET", "/api/v2/tasks?state=BOGUS", None, 400),
    ("GET", "/api/v2/tasks?limit=0", None, 400),
    ("GET", "/api/v2/tasks?limit=abc", None, 400),
    ("GET", "/api/v2/events?after=-1", None, 400),
])
async def test_bad_requests(env: Env, req: tuple[str, str, Any, int]) -> None:
    method, path, body, status = req
    before = await env.store.head_position()
    r = await env.client.request(method, path, json=body, headers=env.h("admin"))
    assert r.status_code == status, r.text
    assert r.json()["detail"]
    assert await env.store.head_position() == before


TRAVERSALS = [
    "datasets/../../bob/datasets/x",
    "datasets/%2e%2e/%2e%2e/bob/datasets",
    "datasets/..%2f..%2fbob",
    "datasets/%252e%252e/x",
    "datasets/%2Fetc%2Fpasswd",
    "%2Fetc%2Fpasswd",
    "datasets//etc/passwd",
    "datasets/a\\..\\b",
    "common/datasets/../../users/bob",
    "code/link/passwd",
    "nowhere/x",
]


@pytest.mark.parametrize("path", TRAVERSALS)
async def test_file_traversal(env: Env, path: str) -> None:
    (env.shared / "users/bob/datasets").mkdir(parents=True, exist_ok=True)
    (env.shared / "users/bob/datasets/x").write_text("bob's secret")
    code = env.shared / "users/alice/code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "link").symlink_to("/etc")
    for method in ("GET", "PUT", "DELETE"):
        r = await env.client.request(method, f"/api/v2/files/{path}", headers=env.h("alice"),
                                     content=b"x" if method == "PUT" else None)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        assert "bob's secret" not in r.text and "root:" not in r.text
    assert (env.shared / "users/bob/datasets/x").read_text() == "bob's secret"


async def test_files_roundtrip_and_upload_limit(env: Env, tmp_path: Any) -> None:
    h = env.h("alice")
    r = await env.client.put("/api/v2/files/datasets/toy/a.jsonl", content=b'{"a": 1}\n', headers=h)
    assert r.status_code == 201 and r.json()["size"] == 9
    r = await env.client.get("/api/v2/files/datasets/toy", headers=h)
    assert [e["name"] for e in r.json()["entries"]] == ["a.jsonl"]
    r = await env.client.get("/api/v2/files/datasets/toy/a.jsonl", headers=h)
    assert r.content == b'{"a": 1}\n'
    env.config.v2.api.max_upload_bytes = 10
    r = await env.client.put("/api/v2/files/datasets/big", content=b"x" * 100, headers=h)
    assert r.status_code == 413
    assert not (env.shared / "users/alice/datasets/big").exists()
    assert not list((env.shared / "users/alice/datasets").glob(".upload-*"))
    r = await env.client.delete("/api/v2/files/datasets/toy", headers=h)
    assert r.status_code == 400
    r = await env.client.delete("/api/v2/files/datasets/toy?recursive=true", headers=h)
    assert r.status_code == 200 and not (env.shared / "users/alice/datasets/toy").exists()
