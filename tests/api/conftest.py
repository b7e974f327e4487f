"""API test fixtures: an app on a fresh SQLite log and shared root, with an admin, two
users (alice, bob) and a disabled user (dave), each with a token."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn

from argus.api.app import create_app
from argus.config import ArgusConfig

ADMIN_TOKEN = "admin-token-for-tests-0123456789abcdef"

ADVANCED = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 1
command: |
  python3 -m argus.examples.toy_trainer \\
    data.train_files=$HOME/datasets/toy/train.jsonl \\
    trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.total_training_steps=3
"""


def make_config(tmp: Path, **api: Any) -> ArgusConfig:
    cfg = ArgusConfig(shared_root=str(tmp / "shared"))
    cfg.v2.sqlite.db_path = str(tmp / "argus.sqlite3")
    cfg.v2.sqlite.synchronous = "NORMAL"
    # Off here: the tests count the events a request writes (test_token_use turns it on).
    cfg.v2.auth.token_use_resolution_s = 0
    for k, v in api.items():
        setattr(cfg.v2.api, k, v)
    return cfg


class Env(msgspec.Struct, kw_only=True):
    client: Any
    app: Any
    config: ArgusConfig
    tokens: dict[str, str]

    def h(self, who: str | None) -> dict[str, str]:
        if who is None:
            return {}
        if who == "bad":
            return {"Authorization": "Bearer not-a-real-token"}
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    @property
    def store(self) -> Any:
        return self.app.state.store

    @property
    def shared(self) -> Path:
        return Path(self.config.shared_root)


async def _seed(client: Any) -> dict[str, str]:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    tokens = {"admin": ADMIN_TOKEN}
    for uid in ("alice", "bob", "dave"):
        r = await client.post("/api/v2/users", json={"user_id": uid}, headers=admin)
        assert r.status_code == 201, r.text
        r = await client.post(f"/api/v2/users/{uid}/tokens", json={"label": "t"}, headers=admin)
        assert r.status_code == 201, r.text
        tokens[uid] = r.json()["token"]
    r = await client.post("/api/v2/users/dave/disable", headers=admin)
    assert r.status_code == 200, r.text
    return tokens


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    """The app in-process (ASGI), seeded."""
    from litestar.testing import AsyncTestClient

    config = make_config(tmp_path)
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    async with AsyncTestClient(app=app) as client:
        tokens = await _seed(client)
        yield Env(client=client, app=app, config=config, tokens=tokens)


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Run ``app`` with uvicorn on a free port in this event loop; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Env]:
    """The app behind a real uvicorn socket (for streaming), seeded."""
    config = make_config(tmp_path)
    app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
    async with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            tokens = await _seed(client)
            yield Env(client=client, app=app, config=config, tokens=tokens)


def put_dataset(shared: Path, user: str) -> None:
    d = shared / "users" / user / "datasets" / "toy"
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
