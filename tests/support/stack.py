"""A real local Argus stack for end-to-end tests (the browser tests use it).

``argus_stack`` (session): the API app (``argus.api.app.create_app``) on a fresh SQLite
log, served by uvicorn on a free 127.0.0.1 port in a background thread (its own event
loop), with the reactor running inside the app as a background task (the embedded
``argus up`` shape) against the session's real Ray cluster (``ray_cluster``,
tests/support/ray_cluster.py). Users ``alice`` and ``bob`` exist, each with a token; the
admin token is :data:`ADMIN_TOKEN`. ``start_stack(workdir, ray=None)`` gives the API alone
(tasks stay QUEUED), for quick UI work.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn

from argus.config import ArgusConfig

__all__ = ["ADMIN_TOKEN", "Stack", "argus_stack", "start_stack"]

ADMIN_TOKEN = "admin-token-for-e2e-0123456789abcdef"
USERS = ("alice", "bob")
START_TIMEOUT_S = 30.0


class Stack(msgspec.Struct, kw_only=True):
    url: str
    config: ArgusConfig
    tokens: dict[str, str]
    reactor: bool  # False only for start_stack(..., ray=None)
    shared_root: Path

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def client(self, who: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=15,
                            headers=self.headers(who) if who else None)


REACTOR_ERRORS: list[BaseException] = []


async def _run_reactor(state: Any, ray: Any) -> None:
    """Run the reactor inside the app (the embedded ``argus up`` shape), on the app's store.
    A crash is kept in ``REACTOR_ERRORS`` so a test waiting for a task can say why."""
    from argus.rayjobs import AsyncRayGateway, RayGateway
    from argus.reactor import Reactor

    gateway = AsyncRayGateway(RayGateway(ray.job_server_url, ray.address))
    reactor = Reactor(state.store, gateway, state.config, reactor_id="e2e")
    try:
        await reactor.run()
    except asyncio.CancelledError:
        await reactor.stop()
        raise
    except BaseException as exc:
        REACTOR_ERRORS.append(exc)
        raise
    finally:
        gateway.close()


class _Server:
    """uvicorn in a thread with its own event loop."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self._run, name="argus-e2e-uvicorn", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self.error = exc

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start in time")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def _seed(url: str) -> dict[str, str]:
    tokens = {"admin": ADMIN_TOKEN}
    with httpx.Client(base_url=url, timeout=15,
                      headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        for uid in USERS:
            r = c.post("/api/v2/users", json={"user_id": uid, "display_name": uid.title()})
            r.raise_for_status()
            r = c.post(f"/api/v2/users/{uid}/tokens", json={"label": "e2e"})
            r.raise_for_status()
            tokens[uid] = r.json()["token"]
    return tokens


def start_stack(workdir: Path, *, ray: Any | None, sftp: bool = False) -> tuple[Stack, _Server]:
    """Build and serve the app; with ``ray`` (a RayCluster) the reactor runs and tasks run;
    with ``sftp``, the SFTP door too (on a free port)."""
    from argus.api.app import create_app

    shared = Path(ray.shared_root) if ray is not None else workdir / "shared"
    doc: dict[str, Any] = {
        "shared_root": str(shared),
        "entrypoint_num_cpus": 0.5,
        "v2": {
            "sqlite": {"db_path": str(workdir / "argus.sqlite3"), "synchronous": "NORMAL"},
            "scheduler": {"poll_interval_s": 0.2, "retry_interval_s": 1.0, "lease_ttl_s": 3.0},
            "taskspec": {"python": sys.executable},  # as `argus up` does
        },
    }
    if ray is not None:
        doc["address"] = ray.job_server_url
        doc["gcs_address"] = ray.address
    config = msgspec.convert(doc, ArgusConfig)
    background = [] if ray is None else [lambda state: _run_reactor(state, ray)]
    if sftp:
        from argus.sftp import sftp_background

        background.append(sftp_background(config, port=0))
    app = create_app(config, admin_token=ADMIN_TOKEN, background=background, heartbeat_s=2.0)
    server = _Server(app)
    url = server.start()
    tokens = _seed(url)
    return Stack(url=url, config=config, tokens=tokens, reactor=ray is not None,
                 shared_root=shared), server


@pytest.fixture(scope="session")
def argus_stack(ray_cluster: Any) -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="argus-e2e-") as tmp:
        stack, server = start_stack(Path(tmp), ray=ray_cluster)
        try:
            yield stack
        finally:
            server.stop()
