"""The WebUI learns the server's words from ``GET /vocabulary``: the endpoint lists exactly
the enums and the event catalog, and the UI handles every task event type the server has
(its timeline describes each one) while keeping no copy of the lists itself."""

from __future__ import annotations

import re
from pathlib import Path

from argus.events import ALL_EVENT_TYPES, FailureKind
from argus.lifecycle import NEXT_STATE, AttemptStatus, TaskState, next_state
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
        assert (s["terminal"], s["waiting"], s["unexamined"], s["holds_ray_job"]) == (
            state.is_terminal(), state.is_waiting(), state.is_unexamined(), state.holds_ray_job())
    cancelable = {s["name"] for s in v["states"] if s["cancelable"]}
    assert cancelable == {s.value for s in TaskState if not s.is_terminal() and s is not TaskState.CANCELING}
    assert [e["name"] for e in v["event_types"]] == list(ALL_EVENT_TYPES)
    assert {e["name"] for e in v["event_types"] if e["about_a_task"]} == set(TASK_EVENT_TYPES)
    for e in v["event_types"]:
        after = {a.value for (_, t), a in NEXT_STATE.items() if t == e["name"]}
        if e["name"] == "TaskSubmitted":
            after.add(next_state(None, "TaskSubmitted").value)
        assert set(e["leads_to"]) == after, e
        assert not after or e["about_a_task"], e
    assert v["failure_kinds"] == [k.value for k in FailureKind]
    assert v["attempt_statuses"] == [s.value for s in AttemptStatus]
    assert v["policies"] == sorted(POLICIES)


def described_in_js() -> set[str]:
    """The event types the timeline's table (``DESCRIBE`` in pages/task_detail.js) has."""
    source = (JS / "pages" / "task_detail.js").read_text()
    body = source[source.index("export const DESCRIBE = {"):]
    body = body[: body.index("\n};\n")]
    return set(re.findall(r"^  ([A-Za-z]+): \(d\) =>", body, re.MULTILINE))


def test_the_ui_describes_every_task_event_the_server_has() -> None:
    """A new task event type on the server fails this test until the UI's timeline says
    what it means (``DESCRIBE`` in pages/task_detail.js); tests/browser/test_vocabulary_ui.py
    asks the running UI the same."""
    handled = described_in_js()
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
            compared = re.findall(r'[!=]==? *"([A-Z_]+)"', line)
            assert not set(compared) & set(names), f"{path.name}:{line_no} compares with {compared}: use vocabulary.js"
