"""Two API processes' apps on one log shared through PostgreSQL (``v2.postgres.url``),
each with its own copy, as behind one load balancer: what a user did through one is
there at once through the other, though the other's copy has not followed the log yet
(its follower is held here: it learns only by asking)."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, _seed, make_config, put_dataset
from tests.support.postgres import PostgresServer

pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")


async def test_a_user_and_a_task_made_through_one_api_are_there_at_once_through_another(
        postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from litestar.testing import AsyncTestClient

    from argus.store.mirror import MirroredStore

    url = await postgres_server.new_database()
    configs = []
    for name in ("a", "b"):
        config = make_config(tmp_path)
        config.v2.sqlite.db_path = str(tmp_path / f"copy-{name}.sqlite3")
        config.v2.postgres.url = url
        configs.append(config)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with AsyncTestClient(app=create_app(configs[0], admin_token=ADMIN_TOKEN, heartbeat_s=0.5)) as a:
        tokens = await _seed(a)
        put_dataset(Path(configs[0].shared_root), "alice")

        async def follows_nothing(self: MirroredStore) -> None:
            return None

        monkeypatch.setattr(MirroredStore, "_follow", follows_nothing)
        async with AsyncTestClient(app=create_app(configs[1], admin_token=ADMIN_TOKEN, heartbeat_s=0.5)) as b:
            assert (await a.post("/api/v2/users", json={"user_id": "erin"}, headers=admin)).status_code == 201
            alice = {"Authorization": f"Bearer {tokens['alice']}"}
            r = await a.post("/api/v2/tasks", content=ADVANCED, headers=alice)
            assert r.status_code == 201, r.text
            task_id = r.json()["task_id"]

            r = await b.get(f"/api/v2/tasks/{task_id}", headers=alice)  # a task b's copy has not seen
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "QUEUED"
            r = await a.post("/api/v2/users/erin/tokens", json={"label": "t2"}, headers=admin)
            erin = {"Authorization": f"Bearer {r.json()['token']}"}
            r = await b.get("/api/v2/tasks", headers=erin)  # a token b's copy has not seen
            assert r.status_code == 200, r.text
            assert (await b.get(f"/api/v2/tasks/{task_id}", headers=erin)).status_code == 404  # still not erin's
            assert (await b.get("/api/v2/tasks/t-nonexistent", headers=alice)).status_code == 404
            r = await b.post(f"/api/v2/tasks/{task_id}/cancel", headers=alice)
            assert r.status_code == 200, r.text
            assert (await a.get(f"/api/v2/tasks/{task_id}", headers=alice)).json()["state"] == "CANCELED"
