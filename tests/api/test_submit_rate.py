"""One user's submissions are capped (a burst, then a rate): beyond it a 429 that says when to
try again, and nothing is written; other users and validation are not held back."""

from __future__ import annotations

from pathlib import Path

from litestar.testing import AsyncTestClient

from argus.api.app import create_app
from argus.api.ratelimit import SubmitRateLimit
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, _seed, make_config, put_dataset


def test_a_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    limit = SubmitRateLimit(burst=3, rate_per_s=2.0, clock=lambda: now[0])
    assert [limit.take("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take("alice") == 0.5  # half a second to the next token
    assert limit.take("bob") == 0.0  # buckets are per user
    now[0] += 0.5
    assert limit.take("alice") == 0.0
    now[0] += 100.0  # refilled to the burst, not beyond
    assert [limit.take("alice") for _ in range(4)][-1] > 0
    assert SubmitRateLimit(burst=0, rate_per_s=2.0).take("alice") == 0.0  # off


async def test_a_user_past_the_cap_gets_429_and_nothing_is_written(tmp_path: Path) -> None:
    config = make_config(tmp_path, submit_burst=2, submit_rate_per_s=0.01)
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    async with AsyncTestClient(app=app) as client:
        tokens = await _seed(client)
        for user in ("alice", "bob"):
            put_dataset(Path(config.shared_root), user)

        def h(user: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tokens[user]}"}

        for _ in range(2):
            r = await client.post("/api/v2/tasks", headers=h("alice"), content=ADVANCED)
            assert r.status_code == 201, r.text
        before = await app.state.store.head_position()
        r = await client.post("/api/v2/tasks", headers=h("alice"), content=ADVANCED)
        assert r.status_code == 429, r.text
        assert int(r.headers["retry-after"]) >= 1
        assert "try again in" in r.json()["detail"]
        assert await app.state.store.head_position() == before
        r = await client.post("/api/v2/tasks/validate", headers=h("alice"), content=ADVANCED)
        assert r.status_code == 200 and r.json()["ok"], r.text
        r = await client.post("/api/v2/tasks", headers=h("bob"), content=ADVANCED)
        assert r.status_code == 201, r.text
