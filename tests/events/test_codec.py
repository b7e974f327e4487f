"""The catalog and its codec: round trips, named decode errors, and upcasting of rows
written with an older schema (on read, never rewritten)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from argus.events import (
    ALL_EVENT_TYPES,
    AttemptOutputTruncated, AttemptOutputsRemoved,
    EventDecodeError,
    EventMeta,
    FailureKind,
    HoldKind,
    NodeHeld,
    NodeReleased,
    ReactorLeaderElected,
    ReactorLeaderReleased,
    TaskDeferred,
    TeamCreated, TeamMemberMoved, TeamQuotaSet, TeamShareSet,
    UnknownEventType,
    decode_event,
    encode_event,
    task_stream,
)
from argus.events import codec
from argus.lifecycle import TRANSITIONS
from projections import open_store
from projections.tasks import TASK_EVENT_TYPES
from projections.tasks_read import all_tasks
from tests.events import factories as f
from tests.support.sql import rows as sql_rows


def one_of_each() -> list[Any]:
    return [
        f.submitted("a"), f.deferred("a"), f.starting("a"), f.attempt_submitted("a"), f.running("a"),
        f.time_limit_reached("a"), f.placement_timed_out("a"), f.preempted("a"), f.checkpoint("a"),
        f.progressed("a"), f.stalled("a"), f.stacks_captured("a"), f.interrupted("a"), f.incomplete("b"),
        f.ended("a", failure_kind=FailureKind.RUNTIME_ERROR), f.retry("a"), f.succeeded("a"), f.failed("a"),
        f.cancel_requested("a"), f.canceled("a", ray_status="STOPPED"), f.user_created("u"),
        f.user_disabled("u"), f.user_enabled("u"), f.user_limits_set("u"), f.token_issued("u", "k"), f.token_revoked("u", "k"),
        f.token_used("u", "k"), f.ssh_key_added("u"), f.ssh_key_revoked("u"),
        TeamCreated(team_id="vision", share=2.0, by="admin", at=f.T0),
        TeamMemberMoved(user_id="u", team_id="vision", by="admin", at=f.T0),
        TeamShareSet(team_id="vision", share=3.0, by="admin", at=f.T0),
        TeamQuotaSet(team_id="vision", gpu_model="A100", nominal_gpus=8.0, borrowing_limit=None, lending_limit=2.0,
                     by="admin", at=f.T0),
        f.capacity({"n1": 4.0, "n2": 0.0}), f.unreachable(),
        NodeHeld(node_id="n1", ip="10.0.0.1", kind=HoldKind.QUARANTINE, reason="pid 7 (sleep 600) of t--a01",
                 by="reactor", held_at=f.T0),
        NodeReleased(node_id="n1", kind=HoldKind.QUARANTINE, by="reactor", released_at=f.T0 + 5),
        ReactorLeaderElected(reactor_id="r", host="h", pid=7, lease_until=f.T0 + 15, elected_at=f.T0),
        ReactorLeaderReleased(reactor_id="r", released_at=f.T0),
        AttemptOutputTruncated(task_id="a", attempt_no=1, submission_id="a--a01", budget_bytes=1 << 20,
                               total_bytes=3 << 20, kept_bytes=1 << 20, dropped_bytes=2 << 20, final=True,
                               observed_at=f.T0),
        AttemptOutputsRemoved(task_id="a", attempt_no=1, paths=["jobs/a--a01/global_step_1"], entries=3,
                              bytes=4096, rule="keep_checkpoints", reason="kept the 2 highest steps",
                              by="reactor", removed_at=f.T0),
    ]


def test_catalog_names_every_type_by_its_class() -> None:
    assert {type(e).__name__ for e in one_of_each()} == set(ALL_EVENT_TYPES)
    assert all(name == cls.__name__ for name, cls in ALL_EVENT_TYPES.items())


def test_lifecycle_covers_exactly_the_task_events() -> None:
    assert set(TRANSITIONS) == set(TASK_EVENT_TYPES)


@pytest.mark.parametrize("event", one_of_each(), ids=lambda e: type(e).__name__)
def test_every_event_round_trips(event: Any) -> None:
    type_, schema, data = encode_event(event)
    assert (type_, schema) == (type(event).__name__, type(event).SCHEMA)
    assert msgspec.json.decode(data)["type"] == type_
    assert decode_event(type_, schema, data) == event


def test_unknown_type_and_bad_payloads_raise_named_errors() -> None:
    with pytest.raises(UnknownEventType):
        decode_event("NoSuchEvent", 1, b"{}")
    with pytest.raises(EventDecodeError):
        decode_event("TaskDeferred", 1, b'{"type":"TaskDeferred","task_id":"a"}')
    _, _, data = encode_event(f.deferred("a"))
    with pytest.raises(EventDecodeError, match="newer"):
        decode_event("TaskDeferred", TaskDeferred.SCHEMA + 1, data)


def test_meta_omits_defaults() -> None:
    assert msgspec.json.encode(EventMeta()) == b"{}"


# ------------------------------------------------------------------ upcasting
V1_DEFERRED = {"type": "TaskDeferred", "task_id": "a", "why": "no_capacity_per_node", "decided_at": f.T0}


@pytest.fixture
def deferred_v3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend TaskDeferred is at schema 3: v1 called ``reason`` ``why`` and had no
    ``needed``/``message``; v2 had no ``message``."""
    monkeypatch.setattr(codec, "_UPCASTERS", {})
    monkeypatch.setattr(TaskDeferred, "SCHEMA", 3)

    @codec.register_upcaster("TaskDeferred", 1)
    def v1_to_v2(p: dict[str, Any]) -> dict[str, Any]:
        p = dict(p)
        p["reason"] = p.pop("why")
        p["needed"] = {"nnodes": 1, "n_gpus_per_node": 0, "cpus_per_node": 0.0}
        return p

    @codec.register_upcaster("TaskDeferred", 2)
    def v2_to_v3(p: dict[str, Any]) -> dict[str, Any]:
        return {**p, "message": f"(v2) {p['reason']}"}


def test_upcasters_run_in_order(deferred_v3: None) -> None:
    event = decode_event("TaskDeferred", 1, msgspec.json.encode(V1_DEFERRED))
    assert isinstance(event, TaskDeferred)
    assert (event.reason, event.message, event.needed.nnodes) == (
        "no_capacity_per_node", "(v2) no_capacity_per_node", 1,
    )
    assert encode_event(event)[1] == 3  # new events are written at the current schema


def test_missing_upcaster_is_a_named_error(deferred_v3: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(codec._UPCASTERS, ("TaskDeferred", 2))
    with pytest.raises(EventDecodeError, match="no upcaster"):
        decode_event("TaskDeferred", 1, msgspec.json.encode(V1_DEFERRED))


async def test_old_row_is_upcast_on_read_and_never_rewritten(deferred_v3: None, tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = await open_store(path)
    await store.append(task_stream("a"), 0, [f.submitted("a")])
    await store.close()
    old = msgspec.json.encode(V1_DEFERRED)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO events (position, stream, version, type, schema_version, data, meta, owner, recorded_at)"
        " VALUES (2, 'task-a', 2, 'TaskDeferred', 1, ?, x'7b7d', NULL, ?)",
        (old, time.time()),
    )
    conn.execute("UPDATE projection_state SET live = 0")  # as a writer that does not fold them must
    conn.close()

    store = await open_store(path)  # the projections are behind: rebuilt through the upcaster
    try:
        [rec] = await store.read(after=1)
        assert isinstance(rec.event, TaskDeferred) and rec.event.reason == "no_capacity_per_node"
        assert [(v.state.value, v.wait_reason) for v in await store.read_snapshot(all_tasks)] == [
            ("PENDING_RESOURCES", "no_capacity_per_node"),
        ]
        # A new event is stored at the current schema; the old row is untouched.
        await store.append(task_stream("a"), 2, [f.deferred("a", reason="max_running")])
        rows = await sql_rows(store, "SELECT position, schema_version, data FROM events WHERE position > 1")
        assert rows[0] == (2, 1, old)
        assert rows[1][:2] == (3, 3)
    finally:
        await store.close()
