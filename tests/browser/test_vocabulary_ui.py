"""The running WebUI learns the server's words from ``GET /api/v2/vocabulary`` and handles
every task event type the server has: asked in a real Chromium (window.argusUnhandledEventTypes),
it names none it lacks; a vocabulary with a type it does not know makes it name that type,
and its timeline says plainly that it cannot describe it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from argus.events import ALL_EVENT_TYPES
from argus.lifecycle import TaskState
from projections.tasks import TASK_EVENT_TYPES
from tests.browser.conftest import Pages

pytestmark = pytest.mark.browser

LEARNED = """async () => {
  const v = await import("/js/vocabulary.js");
  await v.loadVocabulary();
  return { states: v.STATES, terminal: [...v.TERMINAL], waiting: [...v.WAITING],
           cancelable: [...v.CANCELABLE], events: v.EVENT_TYPES, task_events: [...v.TASK_EVENT_TYPES] };
}"""


def test_the_ui_handles_every_event_type_the_server_has(pages: Pages) -> None:
    page = pages.open(None)  # the login page: the vocabulary is public and loaded at start
    assert page.evaluate("window.argusUnhandledEventTypes()") == []
    learned = page.evaluate(LEARNED)
    assert learned["states"] == [s.value for s in TaskState]
    assert set(learned["terminal"]) == {s.value for s in TaskState if s.is_terminal()}
    assert set(learned["waiting"]) == {s.value for s in TaskState if s.is_waiting()}
    assert set(learned["cancelable"]) == (
        {s.value for s in TaskState if not s.is_terminal()} - {TaskState.CANCELING.value})
    assert learned["events"] == list(ALL_EVENT_TYPES)
    assert set(learned["task_events"]) == set(TASK_EVENT_TYPES)


def test_a_new_server_event_type_is_named_and_shown_as_undescribed(pages: Pages) -> None:
    """What the test above would see if the server grew a task event type the UI lacks."""
    page = pages.open(None)
    context = page.context

    def with_new_type(route: Any) -> None:
        body = route.fetch().json()
        body["event_types"].append({"name": "TaskTeleported", "about_a_task": True, "leads_to": ["RUNNING"]})
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    context.route("**/api/v2/vocabulary", with_new_type)
    fresh = context.new_page()
    fresh.goto(pages.stack.url + "/")
    fresh.wait_for_selector("#token")
    assert fresh.evaluate("window.argusUnhandledEventTypes()") == ["TaskTeleported"]
    line = fresh.evaluate("""async () =>
      (await import("/js/pages/task_detail.js")).describe("TaskTeleported", {to: "mars"})""")
    assert "TaskTeleported" in line and "not described" in line
