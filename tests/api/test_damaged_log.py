"""A damaged log, as the API answers it (issue 54): refused at start, or served for reads
only by the admin's choice; damage met while reading is a 5xx that says so, once in the
server log and in /healthz; a resume point past the head is a clear 409."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import msgspec
import pytest
from litestar.testing import AsyncTestClient

from argus.api.app import create_app
from argus.store import LogDamaged
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, Env, make_config, put_dataset


async def _submitted(env: Env) -> str:
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", content=ADVANCED,
                              headers={**env.h("alice"), "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["task_id"])


def _garble_submission(db: Path, task_id: str) -> int:
    """64 bytes of the task's TaskSubmitted payload overwritten in the file; its position."""
    conn = sqlite3.connect(db)
    position, data = conn.execute("SELECT position, data FROM events WHERE type = 'TaskSubmitted' AND stream = ?",
                                  (f"task-{task_id}",)).fetchone()
    conn.close()  # the last connection: the WAL is checkpointed into the file
    raw = db.read_bytes()
    at = raw.index(bytes(data)) + 30
    db.write_bytes(raw[:at] + b"\xff" * 64 + raw[at + 64:])
    return int(position)


def _damage(exc: BaseException) -> LogDamaged:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    assert isinstance(exc, LogDamaged), exc
    return exc


async def test_a_damaged_log_is_refused_or_served_for_reads_only(
        env: Env, tmp_path: Path) -> None:
    task_id = await _submitted(env)
    tokens = env.tokens
    await env.client.__aexit__(None, None, None)  # the server stops
    db = Path(env.config.v2.sqlite.db_path)
    position = _garble_submission(db, task_id)

    refused = make_config(tmp_path)
    with pytest.raises(BaseException) as caught:  # the lifespan's error, in the test client's group
        async with AsyncTestClient(app=create_app(refused, admin_token=ADMIN_TOKEN)):
            pass
    assert f"TaskSubmitted at position {position}" in str(_damage(caught.value))

    reads = make_config(tmp_path)
    reads.v2.sqlite.on_damage = "serve_reads"
    before = db.read_bytes()
    said: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda rec: said.append(rec.getMessage())  # type: ignore[method-assign]
    logging.getLogger("argus.api").addHandler(handler)
    async with AsyncTestClient(app=create_app(reads, admin_token=ADMIN_TOKEN)) as client:
        alice = {"Authorization": f"Bearer {tokens['alice']}"}
        r = await client.get("/api/v2/tasks", headers=alice)
        assert r.status_code == 200 and [t["task_id"] for t in r.json()["items"]] == [task_id], r.text
        for _ in range(2):
            r = await client.get(f"/api/v2/tasks/{task_id}/timeline", headers=alice)
            assert r.status_code == 500, r.text
            assert "the event log is damaged" in r.json()["detail"]
            assert f"position {position}" in r.json()["detail"]
        r = await client.post("/api/v2/tasks", content=ADVANCED,
                              headers={**alice, "Content-Type": "application/yaml"})
        assert r.status_code == 503 and r.json()["detail"].startswith("nothing was written"), r.text
        health = (await client.get("/healthz")).json()
        assert health["status"] == "damaged"
        assert any("serving reads only" in d for d in health["damage"])
        assert any(f"position {position}" in d and "does not decode" in d for d in health["damage"])
    logging.getLogger("argus.api").removeHandler(handler)
    assert db.read_bytes() == before
    # Two timeline reads met it: said once in the server log.
    assert len([m for m in said if f"event at position {position}" in m and "does not decode" in m]) == 1


async def test_a_resume_past_the_head_is_a_clear_error(env: Env) -> None:
    head = await env.store.head_position()
    r = await env.client.get("/api/v2/events", headers={**env.h("alice"), "Last-Event-ID": str(head + 23)})
    assert r.status_code == 409, r.text
    assert f"{head + 23} is past the head of the event log ({head})" in r.json()["detail"]
    assert r.json()["extra"] == {"head": head}
    health = msgspec.json.decode((await env.client.get("/healthz")).content)
    assert health == {"status": "ok"}
