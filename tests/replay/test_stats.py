"""stats: outcomes, wait p50/p95, GPU-hours and retries, per user and overall."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import stats
from argus.replay.stats import percentile
from tests.replay.scenario import T0, Scenario, gpu_seconds


def test_stats_over_the_whole_scenario(scenario: Scenario) -> None:
    s = stats(scenario.db, T0 - 3600, T0 + 3600)
    by_user = {u.user: u for u in s.users}
    alice, bob, overall = by_user["alice"], by_user["bob"], s.overall
    assert (alice.submitted, alice.outcomes) == (3, {"CANCELED": 1, "SUCCEEDED": 1})
    assert (bob.submitted, bob.outcomes) == (2, {"FAILED": 1, "SUCCEEDED": 1})
    assert overall.outcomes == {"CANCELED": 1, "FAILED": 1, "SUCCEEDED": 2}
    # Waits ending at AttemptStarting: B a1 1 s, D 1 s, A 44 s, B a2 645 s (from the retry).
    assert (alice.waits, alice.wait_p50_s, alice.wait_p95_s) == (1, 44.0, 44.0)
    assert (bob.waits, bob.wait_p50_s, bob.wait_p95_s) == (3, 1.0, 645.0)
    assert (overall.waits, overall.wait_p50_s, overall.wait_p95_s) == (4, 1.0, 645.0)
    expected = gpu_seconds()
    assert alice.gpu_hours == pytest.approx(expected["alice"] / 3600)
    assert bob.gpu_hours == pytest.approx(expected["bob"] / 3600)
    assert overall.gpu_hours == pytest.approx(sum(expected.values()) / 3600)
    assert bob.retries == {"INSUFFICIENT_RESOURCES": 1} and alice.retries == {}


def test_stats_window_clips_gpu_time_and_counts_what_happened_inside(scenario: Scenario) -> None:
    # 10:05:00–10:15:00: A runs (10:00:55–10:10:55) → 5 min 55 s × 8 GPUs inside;
    # B attempt 2 runs from 10:11:00 → 4 min × 8 GPUs inside. Nothing submitted but E.
    s = stats(scenario.db, T0 + 300, T0 + 900)
    by_user = {u.user: u for u in s.users}
    assert by_user["alice"].gpu_hours == pytest.approx(355 * 8 / 3600)
    assert by_user["bob"].gpu_hours == pytest.approx(240 * 8 / 3600)
    assert by_user["alice"].submitted == 1 and by_user["alice"].outcomes == {"SUCCEEDED": 1}
    assert by_user["bob"].waits == 1 and by_user["bob"].wait_p50_s == 645.0
    assert s.overall.retries == {}
    assert stats(scenario.db, T0 + 10_000, T0 + 20_000).users == []


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    samples = [float(x) for x in range(1, 101)]
    assert (percentile(samples, 50), percentile(samples, 95)) == (50.0, 95.0)


def test_percentile_rank_is_exact() -> None:
    # In floats 7 / 100 * 100 == 7.000000000000001, so the old rank ceil(p / 100 * n) was 8.
    samples = [float(x) for x in range(1, 101)]
    assert percentile(samples, 7) == 7.0
    assert percentile([float(x) for x in range(1, 26)], 28) == 7.0  # 0.28 * 25 → 7.000…01
    assert percentile([float(x) for x in range(1, 1001)], 99.9) == 999.0  # a float p
    # Every p with one decimal against integer arithmetic: rank = ceil(10p · n / 1000).
    for n in (1, 3, 7, 20, 25, 50, 100, 300, 1000):
        values = [float(x) for x in range(1, n + 1)]
        for tenths in range(1001):
            rank = max(1, -(-tenths * n // 1000))
            assert percentile(values, tenths / 10) == float(rank), (n, tenths / 10)


def test_cli_stats(scenario: Scenario) -> None:
    runner = CliRunner()
    args = ["--db", str(scenario.db), "stats", "--since", "2026-01-05T09:00:00Z", "--until", str(T0 + 3600)]
    doc = json.loads(runner.invoke(replay, [*args, "--json"]).output)
    assert doc["overall"]["outcomes"]["SUCCEEDED"] == 2
    table = runner.invoke(replay, args)
    assert table.exit_code == 0 and "INSUFFICIENT_RESOURCES 1" in table.output
    assert table.output.startswith("From 2026-01-05 09:00:00 UTC to ")
    whole = runner.invoke(replay, ["--db", str(scenario.db), "stats"])  # no --since: the whole log
    assert whole.exit_code == 0 and whole.output.startswith("From the start of the log to "), whole.output


def test_stats_goodput_sums_each_ended_tasks_whole_life(scenario: Scenario) -> None:
    """Tasks that ended in the window count whole; the one still waiting at the log's end
    counts (its waiting) when the window reaches the end."""
    import sqlite3

    from projections.goodput import task_goodput
    from projections.tasks_read import all_tasks

    with sqlite3.connect(scenario.db) as db:
        views = all_tasks(db)
    s = stats(scenario.db, T0 - 3600, T0 + 3600)
    for u in s.users:
        mine = [v for v in views if v.user == u.user and v.state.is_terminal()]
        assert u.goodput_tasks == len(mine) + (u.user == "alice")  # E, still waiting
        assert u.goodput.held == pytest.approx(sum(task_goodput(v, 0).held for v in mine))
        assert u.goodput.failed == pytest.approx(sum(task_goodput(v, 0).failed for v in mine))
    assert s.overall.goodput.failed > 0  # D failed USER_ERROR: its attempt held GPUs for nothing


def test_stats_goodput_of_a_run_that_stalled_and_resumed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from argus.events import task_stream
    from projections import open_store
    from tests.events import factories as f
    from tests.projections.test_goodput import stalled_then_resumed

    db = tmp_path / "argus.sqlite3"

    async def record() -> None:
        store = await open_store(str(db), synchronous="NORMAL")
        try:
            await store.append(task_stream("t"), 0, stalled_then_resumed(2, 62), owner="alice")
        finally:
            await store.close()

    asyncio.run(record())
    s = stats(db, f.T0 - 60, f.T0 + 3600)
    g = s.overall.goodput
    assert (s.overall.goodput_tasks, g.held, g.productive) == (1, pytest.approx(980.0), pytest.approx(288.0))
    assert (g.stalled, g.lost, g.lost_steps) == (pytest.approx(420.0), pytest.approx(32.0), 1)
    out = CliRunner().invoke(replay, ["--db", str(db), "stats", "--since", str(f.T0 - 60)]).output
    assert "Goodput of the tasks that ended in the window" in out and "0.01 (1 steps)" in out, out
