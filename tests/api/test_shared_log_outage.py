"""The API on the log shared through PostgreSQL (``v2.postgres.url``), while that database
is down: reads are served from the process's copy, a submission is refused with 503 and
``Retry-After`` saying nothing was written, and once the database is back the same
submission is taken. On a throwaway server of its own (stopped and started again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.api.app import create_app
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, _seed, make_config, put_dataset
from tests.support.postgres import PostgresServer, find_postgres_bin

pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")


async def test_while_the_shared_log_is_down_reads_are_served_and_writes_get_503(tmp_path: Path) -> None:
    from litestar.testing import AsyncTestClient

    if find_postgres_bin("initdb") is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; scripts/test.sh does it)")
    server = PostgresServer().start()
    try:
        config = make_config(tmp_path)
        config.v2.postgres.url = await server.new_database()
        app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
        async with AsyncTestClient(app=app) as client:
            tokens = await _seed(client)
            alice = {"Authorization": f"Bearer {tokens['alice']}"}
            put_dataset(Path(config.shared_root), "alice")
            r = await client.post("/api/v2/tasks", content=ADVANCED, headers=alice)
            assert r.status_code == 201, r.text
            task_id = r.json()["task_id"]

            server.pause()
            assert (await client.get(f"/api/v2/tasks/{task_id}", headers=alice)).status_code == 200
            r = await client.post("/api/v2/tasks", content=ADVANCED, headers=alice)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "5" and "nothing was written" in r.json()["detail"]

            server.resume()
            for _ in range(50):  # the pool's broken connections are replaced as they fail
                r = await client.post("/api/v2/tasks", content=ADVANCED, headers=alice)
                if r.status_code != 503:
                    break
            assert r.status_code == 201, r.text
            listed = (await client.get("/api/v2/tasks", headers=alice)).json()
            assert len(listed["items"]) == 2
    finally:
        server.stop()
