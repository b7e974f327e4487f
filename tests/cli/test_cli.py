"""The client commands against a real server (uvicorn in a thread), via click's runner."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from argus.api.app import create_app
from argus.cli import main
from tests.api.conftest import ADMIN_TOKEN, ADVANCED, make_config, put_dataset


class Server:
    def __init__(self, tmp: Path) -> None:
        self.config = make_config(tmp)
        app = create_app(self.config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Server":
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli")) as s:
        yield s


def run(server: Server, *args: str, token: str = ADMIN_TOKEN, input: str | None = None) -> Any:
    env = {"ARGUS_URL": server.url, "ARGUS_TOKEN": token, "XDG_CONFIG_HOME": "/nonexistent"}
    return CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)


def test_users_tokens_submit_show_cancel(server: Server, tmp_path: Path) -> None:
    r = run(server, "users", "create", "carol", "--name", "Carol")
    assert r.exit_code == 0, r.output
    token = r.output.strip().splitlines()[-1].split(": ")[-1]
    assert len(token) > 30
    r = run(server, "users", "list")
    assert "carol" in r.output and "Carol" in r.output
    put_dataset(Path(server.config.shared_root), "carol")
    spec = tmp_path / "task.yaml"
    spec.write_text(ADVANCED)
    r = run(server, "submit", "--validate", str(spec), token=token)
    assert r.exit_code == 0 and "valid" in r.output, r.output
    r = run(server, "submit", "--dry-run", str(spec), token=token)  # no cluster seen: a place, no time
    assert r.exit_code == 0 and "it would be number 1 in line" in r.output and "expected" not in r.output, r.output
    r = run(server, "submit", str(spec), token=token)
    assert r.exit_code == 0, r.output
    task_id = r.output.strip().splitlines()[0]
    assert task_id.startswith("carol-ppo-")
    r = run(server, "tasks", token=token)
    assert task_id in r.output and "QUEUED" in r.output
    r = run(server, "tasks", "--json", token=token)
    assert json.loads(r.output)["items"][0]["task_id"] == task_id
    r = run(server, "show", task_id, token=token)
    assert "QUEUED" in r.output and "position 1" in r.output
    r = run(server, "spec", task_id, "--expanded", token=token)
    assert "/users/carol/datasets/toy/train.jsonl" in r.output
    r = run(server, "logs", task_id, token=token)
    assert r.exit_code == 0
    r = run(server, "cancel", task_id, token=token)
    assert r.exit_code == 0 and "CANCELED" in r.output
    r = run(server, "watch", task_id, token=token)
    assert r.exit_code == 1 and "canceled by" in r.output  # not a success
    r = run(server, "show", task_id, token=token)
    assert "failure   CANCELED\n" in r.output  # no empty ": " after the kind
    r = run(server, "tasks", token=token)
    assert "CANCELED:" not in r.output
    r = run(server, "tokens", "list", token=token)
    assert "initial" in r.output and token not in r.output


def test_users_set_limits(server: Server, tmp_path: Path) -> None:
    r = run(server, "users", "create", "erin", "--no-issue-token")
    assert r.exit_code == 0, r.output
    r = run(server, "users", "set", "erin", "--max-priority", "7", "--may-pin")
    assert r.exit_code == 0, r.output
    assert "erin: priority up to 7, may pin tasks" in r.output
    r = run(server, "users", "set", "erin", "--max-queued", "3")  # the others stay as they were
    assert r.exit_code == 0 and "priority up to 7, may pin" in r.output and "3 task(s) waiting" in r.output
    assert "no cap on GPUs held at once" in r.output
    r = run(server, "users", "set", "erin", "--max-gpus", "6")
    assert r.exit_code == 0 and "3 task(s) waiting, 6 GPUs held at once" in r.output, r.output
    r = run(server, "users", "list", "--json")
    erin = next(u for u in json.loads(r.output) if u["user_id"] == "erin")
    assert (erin["max_priority"], erin["may_pin"], erin["max_queued"], erin["max_gpus"]) == (7, True, 3, 6)
    r = run(server, "users", "list")
    assert "MAX PRIORITY" in r.output and "MAX GPUS" in r.output
    r = run(server, "users", "set", "nobody", "--max-priority", "1")
    assert r.exit_code != 0 and "not found" in r.output


def test_exit_codes(server: Server, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: advanced\nnnodes: [\n")
    r = run(server, "submit", str(bad))
    assert r.exit_code == 1 and "error: 400" in r.output
    assert run(server, "show", "nope").exit_code == 1
    assert run(server, "tasks", token="wrong").exit_code == 1
    assert run(server, "show").exit_code == 2
    env = {"ARGUS_URL": "http://127.0.0.1:9", "ARGUS_TOKEN": "x", "XDG_CONFIG_HOME": "/nonexistent"}
    r = CliRunner().invoke(main, ["tasks"], env=env)
    assert r.exit_code == 3 and "cannot reach" in r.output


def test_files_and_config(server: Server, tmp_path: Path) -> None:
    src = tmp_path / "d.jsonl"
    src.write_text("{}\n")
    assert run(server, "files", "put", "datasets/x/d.jsonl", str(src)).exit_code == 0
    r = run(server, "files", "ls", "datasets/x")
    assert "d.jsonl" in r.output
    r = run(server, "files", "get", "datasets/x/d.jsonl")
    assert r.output == "{}\n"
    assert run(server, "files", "rm", "datasets/x/d.jsonl").exit_code == 0
    r = CliRunner().invoke(main, ["config", "show"], env={"ARGUS_V2__API__PORT": "9999",
                                                          "ARGUS_V2__POSTGRES__URL": "postgresql://a:pw@db/argus"})
    assert r.exit_code == 0 and "port: 9999" in r.output
    assert "postgresql://a:***@db/argus" in r.output and ":pw@" not in r.output


def test_client_config_file(server: Server, tmp_path: Path) -> None:
    (tmp_path / "argus").mkdir()
    (tmp_path / "argus" / "client.yaml").write_text(f"url: {server.url}\ntoken: {ADMIN_TOKEN}\n")
    r = CliRunner().invoke(main, ["users", "list"], env={"XDG_CONFIG_HOME": str(tmp_path),
                                                         "ARGUS_URL": None, "ARGUS_TOKEN": None})
    assert r.exit_code == 0 and "admin" in r.output
    _ = httpx


def test_show_names_each_attempts_last_checkpoint(server: Server) -> None:
    """What a preemption or a retry resumes from, as the reactor recorded it."""
    import asyncio

    from argus.events import task_stream
    from projections import open_store
    from tests.events import factories as f

    tid = "alice-ppo-20260101-000000-c0c0"

    async def record() -> None:  # another writer of the server's database, as the reactor is
        store = await open_store(server.config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            await store.append(task_stream(tid), 0, [f.submitted(tid), f.starting(tid), f.attempt_submitted(tid),
                                                     f.running(tid), f.checkpoint(tid, step=40)], owner="alice")
        finally:
            await store.close()

    asyncio.run(record())
    r = run(server, "show", tid)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if f"{tid}--a01" in line)
    assert "step 40 at" in row, r.output


def test_show_says_where_a_stalled_and_resumed_tasks_gpu_time_went(server: Server) -> None:
    """The must-show of goodput: a run that stalled and resumed from its checkpoint shows
    the GPU time it lost (stalled, and the step trained again)."""
    import asyncio

    from argus.events import task_stream
    from projections import open_store
    from tests.projections.test_goodput import stalled_then_resumed

    tid = "alice-ppo-20260101-000000-5ta1"

    async def record() -> None:
        store = await open_store(server.config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            await store.append(task_stream(tid), 0, stalled_then_resumed(2, 62, task=tid), owner="alice")
        finally:
            await store.close()

    asyncio.run(record())
    r = run(server, "show", tid)
    assert r.exit_code == 0, r.output
    assert "goodput   29 % productive: 288 GPU-s of 980 GPU-s held; waited 20s" in r.output, r.output
    assert ("the rest: placement 60 GPU-s (6 %); start-up 160 GPU-s (16 %); stalled 420 GPU-s (43 %); "
            "lost to restarts 32 GPU-s (3 %, 1 step(s) trained again); other 20 GPU-s (2 %)") in r.output, r.output
    # Per user and for the cluster (alice's other task here, from the test above, runs
    # since long ago: its start-up is large, and it stalled nothing).
    table = run(server, "goodput").output.splitlines()
    assert table[0].split()[:5] == ["USER", "TASKS", "HELD", "GPU-H", "PRODUCTIVE"], table
    assert table[-1].startswith("all users"), table
    alice = next(u for u in json.loads(run(server, "goodput", "--json").output)["users"] if u["user"] == "alice")
    assert (alice["goodput"]["stalled"], alice["goodput"]["lost"]) == (420.0, 32.0)
