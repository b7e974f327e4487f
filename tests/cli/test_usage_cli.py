"""``argus usage`` equals a hand count over a small synthetic log, through the API and
after ``argus replay usage`` rebuilt the projections from the log; the config's teams are
seeded once (a second start records nothing), and ``argus teams`` changes them."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from argus.api.app import create_app
from argus.cli import main
from argus.config import ArgusConfig, TeamQuotaSeed, TeamSeed
from argus.events import AttemptProgressed, CapacityObserved, NodeCapacity, task_stream, user_stream
from argus.events.catalog import EventBase
from projections import open_store
from tests.api.conftest import ADMIN_TOKEN, make_config
from tests.events import factories as f
from tests.support.sql import rows as sql_rows

H = 3600.0
D = 1_767_571_200.0  # 2026-01-05 00:00 UTC
DAY2 = D + 24 * H  # 2026-01-06


def _progress(tid: str, step: int, at: float) -> AttemptProgressed:
    return AttemptProgressed(task_id=tid, attempt_no=1, submission_id=f.submission_id_for(tid, 1), step=step,
                             step_at=at, first_step=1, total_steps=10, observed_at=at)


def _log() -> dict[str, list[EventBase]]:
    """alice's task A: 4 GPUs on n1 (A100) from 23:00 on the 5th to 02:00 on the 6th,
    stepping 23:30 to 01:30, succeeded; bob's B: 4 GPUs on n2 (H100) 03:00-05:00 on the
    6th, failed; alice's C: 4 GPUs on no known node since 12:00 on the 6th, running."""
    a, b, c = "alice-ppo-20260105-220000-aaaa", "bob-ppo-20260106-010000-bbbb", "alice-ppo-20260106-100000-cccc"
    nodes = [NodeCapacity(node_id=n, ip=f"10.0.0.{i}", total_gpus=8.0, free_gpus=8.0, total_cpus=64.0,
                          free_cpus=64.0, gpu_type=model) for i, (n, model) in enumerate((("n1", "A100"), ("n2", "H100")))]
    return {
        user_stream("alice"): [f.user_created("alice")],
        user_stream("bob"): [f.user_created("bob")],
        "cluster": [CapacityObserved(nodes=nodes, observed_at=D)],
        task_stream(a): [f.submitted(a, "alice", at=D + 22 * H), f.starting(a, at=D + 23 * H, nodes=("n1",)),
                         f.running(a, at=D + 23 * H), _progress(a, 1, D + 23.5 * H), _progress(a, 10, D + 25.5 * H),
                         f.ended(a, at=D + 26 * H), f.succeeded(a, at=D + 26 * H)],
        task_stream(b): [f.submitted(b, "bob", at=DAY2 + 1 * H), f.starting(b, at=DAY2 + 3 * H, nodes=("n2",)),
                         f.running(b, at=DAY2 + 3 * H),
                         f.ended(b, ray_status="FAILED", failure_kind=f.FailureKind.USER_ERROR, exit_code=1,
                                 at=DAY2 + 5 * H), f.failed(b, at=DAY2 + 5 * H)],
        task_stream(c): [f.submitted(c, "alice", at=DAY2 + 10 * H), f.starting(c, at=DAY2 + 12 * H),
                         f.running(c, at=DAY2 + 12 * H)],
    }


# The hand count, per (day, user): GPU-hours by model, tasks finished, held, productive, wait hours.
HAND = {
    ("2026-01-05", "alice"): ({"A100": 4.0}, 0, 0.0, 0.0, 0.0),  # A: 23:00-24:00 x 4
    ("2026-01-06", "alice"): ({"A100": 8.0, "any": 48.0}, 1, 12.0, 8.0, 1.0),  # A: 0-2h x 4; C: 12-24h x 4
    ("2026-01-06", "bob"): ({"H100": 8.0}, 1, 8.0, 0.0, 2.0),  # B: 3-5h x 4, failed: nothing productive
}
TEAM = {"alice": "vision", "bob": "nlp"}


def _check(report: dict[str, Any], by: str) -> None:
    got = {(r["day"], r["key"]): r for r in report["rows"]}
    want = {(day, TEAM[user] if by == "team" else user): v for (day, user), v in HAND.items()}
    assert set(got) == set(want), report
    for key, (models, tasks, held, productive, wait) in want.items():
        r = got[key]
        assert r["gpu_hours_by_model"] == pytest.approx(models) and r["gpu_hours"] == pytest.approx(sum(models.values()))
        assert (r["tasks_finished"], r["held_gpu_hours"], r["productive_gpu_hours"], r["wait_hours"]) == \
            pytest.approx((tasks, held, productive, wait)), key
        assert r["goodput"] == (pytest.approx(productive / held) if held else None)


class _Server:
    def __init__(self, config: ArgusConfig) -> None:
        app = create_app(config, admin_token=ADMIN_TOKEN, heartbeat_s=0.5)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> ArgusConfig:
    config = make_config(tmp_path_factory.mktemp("usage"))
    config.v2.scheduler.fairshare.teams = {
        "vision": TeamSeed(share=2.0, members=["alice"], quotas={"A100": TeamQuotaSeed(nominal_gpus=8, lending_limit=4)}),
        "nlp": TeamSeed(members=["bob", "nobody-yet"]),
    }

    async def record() -> None:
        store = await open_store(config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            for stream, events in _log().items():
                await store.append(stream, 0, events, owner=stream.split("-")[1] if "-" in stream else None)
        finally:
            await store.close()

    asyncio.run(record())
    return config


def _run(url: str, *args: str) -> Any:
    env = {"ARGUS_URL": url, "ARGUS_TOKEN": ADMIN_TOKEN, "XDG_CONFIG_HOME": "/nonexistent"}
    r = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_usage_equals_the_hand_count_before_and_after_a_rebuild(config: ArgusConfig) -> None:
    window = ("--since", "2026-01-05", "--until", "2026-01-07")
    db = config.v2.sqlite.db_path
    with _Server(config) as url:
        for by in ("user", "team"):
            _check(json.loads(_run(url, "usage", "--by", by, *window, "--format", "json")), by)
            _check(json.loads(_run(url, "replay", "--db", db, "usage", "--by", by, *window, "--format", "json")), by)
        table = list(csv.reader(io.StringIO(_run(url, "usage", *window, "--format", "csv"))))
        assert table[0][:6] == ["day", "user", "GPU-h", "GPU-h A100", "GPU-h H100", "GPU-h any"], table
        assert table[2][:6] == ["2026-01-06", "alice", "56.0", "8.0", "0.0", "48.0"], table
        shown = _run(url, "usage", "--by", "team", *window)
        assert "vision" in shown and "67 %" in shown, shown  # A's goodput: 8 of 12 GPU-h
        # The seeded teams, then an admin's change through the CLI.
        assert "A100" in _run(url, "teams", "show", "vision") and "alice" in _run(url, "teams", "show", "vision")
        _run(url, "teams", "create", "infra", "--share", "3")
        _run(url, "teams", "move", "bob", "infra")
        _run(url, "teams", "set-quota", "infra", "--gpu-model", "H100", "--nominal", "2", "--borrowing-limit", "1")
        listed = _run(url, "teams", "list")
        assert "infra" in listed and "H100 2" in listed, listed
    teams_events = asyncio.run(_team_events(config))
    with _Server(config) as url:  # seeding again records nothing: the log decides now
        assert "bob" in _run(url, "teams", "show", "infra")
    assert asyncio.run(_team_events(config)) == teams_events


async def _team_events(config: ArgusConfig) -> int:
    store = await open_store(config.v2.sqlite.db_path, synchronous="NORMAL")
    try:
        return len(await sql_rows(store, "SELECT position FROM events WHERE stream = 'teams'", ()))
    finally:
        await store.close()
