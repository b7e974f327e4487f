"""Every answer says the WebUI may not be framed and may run only its own scripts; the API's
documentation pages keep their renderer (frame headers only)."""

from __future__ import annotations

from argus.api.headers import CONTENT_SECURITY_POLICY
from tests.api.conftest import Env


async def test_the_webui_and_the_api_send_the_policy_and_frame_headers(env: Env) -> None:
    for path in ("/", "/api/v2/tasks", "/api/v2/nope"):
        r = await env.client.get(path, headers=env.h("alice"))
        assert r.headers["x-frame-options"] == "DENY", path
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


async def test_the_api_docs_keep_their_renderer(env: Env) -> None:
    r = await env.client.get("/schema/openapi.json")
    assert r.status_code == 200
    assert r.headers["x-frame-options"] == "DENY"
    assert "content-security-policy" not in r.headers
