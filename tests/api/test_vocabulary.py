"""The WebUI learns the server's words from ``GET /vocabulary``: the endpoint lists exactly
the enums and the event catalog, and the UI handles every task event type the server has
(its timeline describes each one) while keeping no copy of the lists itself."""

from __future__ import annotations

import re
from pathlib import Path

from argus.events import ALL_EVENT_TYPES, FailureKind
from argus.lifecycle import AttemptStatus, TaskState
from argus.scheduler import POLICIES
from projections.tasks import TASK_EVENT_TYPES
from tests.api.conftest import Env

JS = Path(__file__).resolve().parents[2] / "argus" / "ui" / "static" / "js"


async def test_the_vocabulary_is_the_servers_own_and_public(env: Env) -> None:
    r = await env.client.get("/api/v2/vocabulary")  # no token: it names no one's tasks
    assert r.status_code == 200, r.text
    v = r.json()
    assert [s["name"] for s in v["states"]] == [s.value for s in TaskState]
    for s in v["states"]:
        state = TaskState(s["name"])
        assert (s["terminal"], s["waiting"], s["holds_ray_job"]) == (
            state.is_terminal(), state.is_waiting(), state.holds_ray_job())
    assert [e["name"] for e in v["event_types"]] == list(ALL_EVENT_TYPES)
    assert {e["name"] for e in v["event_types"] if e["about_a_task"]} == set(TASK_EVENT_TYPES)
    assert v["failure_kinds"] == [k.value for k in FailureKind]
    assert v["attempt_statuses"] == [s.value for s in AttemptStatus]
    assert v["policies"] == sorted(POLICIES)


def test_the_ui_describes_every_task_event_the_server_has() -> None:
    """A new task event type on the server fails this test until the UI's timeline says
    what it means (``describe`` in pages/task_detail.js)."""
    source = (JS / "pages" / "task_detail.js").read_text()
    body = source[source.index("export function describe("):]
    body = body[: body.index("\n}\n")]
    handled = set(re.findall(r'case "([A-Za-z]+)":', body))
    assert handled == set(TASK_EVENT_TYPES), (
        f"not described: {sorted(set(TASK_EVENT_TYPES) - handled)}; unknown: {sorted(handled - set(TASK_EVENT_TYPES))}")


def test_the_ui_keeps_no_copy_of_the_lists() -> None:
    """No JS file lists the states or the event types: they come from the server."""
    names = [s.value for s in TaskState] + list(ALL_EVENT_TYPES)
    for path in JS.rglob("*.js"):
        text = path.read_text()
        for line_no, line in enumerate(text.splitlines(), start=1):
            listed = [n for n in names if f'"{n}"' in line]
            assert len(listed) < 2 or "case " in line, f"{path.name}:{line_no} lists {listed}: use vocabulary.js"
