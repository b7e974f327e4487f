"""at: the world at a position or time equals what the API showed at that moment."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import ReplayError, World, world_at
from tests.replay.scenario import A, B, C, D, E, Scenario


def _seen(world: World) -> tuple[dict[str, str], list[tuple[str, str | None]], dict[str, float]]:
    return (
        {t.task_id: t.state for t in world.tasks},
        [(q.task_id, q.wait_reason) for q in world.queue],
        {n.node_id: n.free_gpus for n in world.cluster.nodes},
    )


def test_at_every_position_equals_what_the_api_showed(scenario: Scenario) -> None:
    assert len(scenario.captures) == 40
    for cap in scenario.captures:
        world = world_at(scenario.db, cap.position)
        assert world.position == cap.position
        assert _seen(world) == (cap.states, cap.queue, cap.free_gpus), f"at position {cap.position}"


def test_at_a_moment_with_a_retry_a_deferral_and_a_priority(scenario: Scenario) -> None:
    # Right after C (priority 5) was deferred while Ray was unreachable.
    pos = next(c.position for c in scenario.captures if c.states.get(C) == "PENDING_RESOURCES")
    world = world_at(scenario.db, pos, policy="priority")
    assert [(q.position, q.task_id, q.wait_reason) for q in world.queue] == [
        (1, C, "capacity_unknown"), (2, B, "retry_backoff"), (3, A, "no_capacity_per_node"),
    ]
    # fifo (the default) considers arrival only: C's priority does not move it up.
    fifo = world_at(scenario.db, pos)
    assert [(q.position, q.task_id) for q in fifo.queue] == [(1, B), (2, A), (3, C)]
    assert [q.seq for q in fifo.queue] == sorted(q.seq for q in fifo.queue)
    assert world.cluster.reachable is False and "refused" in world.cluster.error
    assert [n.free_gpus for n in world.cluster.nodes] == [4.0, 2.0]  # last known, kept
    assert world.running == []


def test_running_attempts(scenario: Scenario) -> None:
    pos = next(c.position for c in scenario.captures if c.states.get(A) == "SUBMITTED")
    world = world_at(scenario.db, pos)
    assert [(r.task_id, r.attempt_no, r.ray_status, r.nnodes * r.n_gpus_per_node) for r in world.running] == [
        (A, 1, "SUBMITTED", 8), (D, 1, "RUNNING", 2),
    ]
    assert world.running[1].started_at is not None and world.running[0].started_at is None
    later = world_at(scenario.db, pos + 2)  # D ended and failed: no longer running
    assert [r.task_id for r in later.running] == [A]


def test_at_time_resolves_to_the_last_event_recorded_by_then(scenario: Scenario) -> None:
    cap, nxt = scenario.captures[20], scenario.captures[21]
    assert nxt.recorded_at - cap.recorded_at > 2e-6  # appends are milliseconds apart
    between = (cap.recorded_at + nxt.recorded_at) / 2
    iso = dt.datetime.fromtimestamp(between, dt.timezone.utc).isoformat()
    for point in (iso, iso.replace("+00:00", "Z"), f"@{between!r}", between, cap.recorded_at):
        world = world_at(scenario.db, point)
        assert (world.position, world.recorded_at) == (cap.position, cap.recorded_at), point
    assert world_at(scenario.db, "2000-01-01T00:00:00Z").position == 0


def test_at_zero_and_head_and_out_of_range(scenario: Scenario) -> None:
    empty = world_at(scenario.db, 0)
    assert empty.tasks == [] and empty.queue == [] and empty.cluster.reachable is None
    head = world_at(scenario.db)
    assert head.position == scenario.captures[-1].position
    assert [q.task_id for q in head.queue] == [E]
    with pytest.raises(ReplayError, match="outside the log"):
        world_at(scenario.db, 10_000)


def test_cli_at_json_and_table(scenario: Scenario) -> None:
    runner = CliRunner()
    res = runner.invoke(replay, ["--db", str(scenario.db), "at", "13", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["position"] == 13
    assert {t["task_id"]: t["state"] for t in doc["tasks"]} == {A: "PENDING_RESOURCES", B: "PENDING_RESOURCES"}
    table = runner.invoke(replay, ["--db", str(scenario.db), "at", "13"])
    assert "Queue (in order):" in table.output and "retry_backoff" in table.output
    bad = runner.invoke(replay, ["--db", str(scenario.db), "at", "yesterday"])
    assert bad.exit_code == 2 and "neither ISO-8601 nor UNIX seconds" in bad.output
