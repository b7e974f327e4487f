"""The WebUI at a glance, in a real Chromium: task rows with name, GPUs, step X of N and
why a task waits or failed; the tasks, queue and cluster pages on a half-screen (800 px)
without a horizontal scroll bar; the colours follow the browser's light / dark preference.

Against the API alone (``start_stack(..., ray=None)``): the reactor's part (a task
starting, running, failing; the cluster's capacity) is appended as events by a second
writer on the same database, and a running task's driver.log is written by hand.
Screenshots go to artifacts/screenshots/glance-*.png (git-ignored).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

from argus.events import (
    AttemptEnded,
    AttemptProgressed,
    AttemptRunning,
    AttemptStarting,
    CapacityObserved,
    Demand,
    FailureKind,
    NodeCapacity,
    SubmissionPayload,
    TaskDeferred,
    TaskFailed,
    cluster_stream,
    task_stream,
)
from argus.store import AppendBatch
from projections import open_store
from tests.browser.conftest import Pages
from tests.browser.conftest import shot as conftest_shot
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.browser

NARROW = {"width": 800, "height": 700}
WIDE = {"width": 1280, "height": 860}


def spec(*, nnodes: int = 1, gpus: int = 1, steps: int = 3, name: str | None = None) -> str:
    head = f"name: {name}\n" if name else ""
    return head + (
        "kind: advanced\nworkload: ppo\n"
        f"nnodes: {nnodes}\nn_gpus_per_node: {gpus}\n"
        "command: |\n"
        "  python3 -m argus.examples.toy_trainer \\\n"
        "    data.train_files=$HOME/datasets/toy/train.jsonl \\\n"
        f"    trainer.nnodes={nnodes} trainer.n_gpus_per_node={gpus} "
        f"trainer.total_training_steps={steps}\n")


LONG_ERROR = ("ModuleNotFoundError: No module named 'numpy' while importing "
              "/shared/users/alice/code/a_rather_long_package_name/with/a/deeply/nested/"
              "module_path_that_has_no_spaces_at_all/trainer_entrypoint.py " + "and more words " * 12)


class Glance(msgspec.Struct, kw_only=True):
    stack: Stack
    running: str
    waiting: str
    failed: str
    bobs: str


def _submit(stack: Stack, who: str, text: str) -> str:
    with stack.client(who) as c:
        r = c.post("/api/v2/tasks", content=text, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        return str(r.json()["task_id"])


def _append(stack: Stack, batches: list[AppendBatch]) -> None:
    """Append as the reactor would: another writer on the same database. In a thread of its
    own: Playwright's sync API keeps an event loop running in this one."""
    async def go() -> None:
        store = await open_store(stack.config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            await store.append_batches(batches)
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, go()).result()


def _payload(sid: str) -> SubmissionPayload:
    return SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                             entrypoint_resources={}, runtime_env={}, metadata={})


@pytest.fixture(scope="module")
def glance() -> Iterator[Glance]:
    with tempfile.TemporaryDirectory(prefix="argus-glance-") as tmp:
        stack, server = start_stack(Path(tmp), ray=None)
        try:
            for user in ("alice", "bob"):
                d = stack.shared_root / "users" / user / "datasets" / "toy"
                d.mkdir(parents=True, exist_ok=True)
                (d / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
            failed = _submit(stack, "alice", spec())
            bobs = _submit(stack, "bob", spec(gpus=4))
            waiting = _submit(stack, "alice", spec(nnodes=2, gpus=4))
            running = _submit(stack, "alice", spec(gpus=2, steps=7, name="tiny toy run"))
            now = time.time()
            run_sid, fail_sid = f"{running}--a01", f"{failed}--a01"
            deferred = {
                t: TaskDeferred(task_id=t, reason="no_capacity_per_node",
                                message=f"needs {n} nodes with 4 GPUs free; free GPUs per node: [0, 2]",
                                needed=Demand(nnodes=n, n_gpus_per_node=4, cpus_per_node=4),
                                free_gpus_per_node=[0.0, 2.0], decided_at=now)
                for t, n in ((waiting, 2), (bobs, 1))}
            _append(stack, [
                AppendBatch(stream=task_stream(running), expected_version=1, owner="alice", events=[
                    AttemptStarting(task_id=running, attempt_no=1, submission_id=run_sid,
                                    payload=_payload(run_sid), decided_at=now - 130),
                    AttemptRunning(task_id=running, attempt_no=1, submission_id=run_sid,
                                   started_at=now - 125),
                    # its driver reported step 3 (argus.rayjobs.reports): what the list shows
                    AttemptProgressed(task_id=running, attempt_no=1, submission_id=run_sid, step=3,
                                      step_at=now, observed_at=now)]),
                AppendBatch(stream=task_stream(failed), expected_version=1, owner="alice", events=[
                    AttemptStarting(task_id=failed, attempt_no=1, submission_id=fail_sid,
                                    payload=_payload(fail_sid), decided_at=now - 100),
                    AttemptRunning(task_id=failed, attempt_no=1, submission_id=fail_sid,
                                   started_at=now - 95),
                    AttemptEnded(task_id=failed, attempt_no=1, submission_id=fail_sid,
                                 ray_status="FAILED", exit_code=1,
                                 failure_kind=FailureKind.USER_ERROR, evidence=LONG_ERROR,
                                 ended_at=now - 35),
                    TaskFailed(task_id=failed, attempt_no=1, failure_kind=FailureKind.USER_ERROR,
                               error_summary=LONG_ERROR, finished_at=now - 35)]),
                AppendBatch(stream=task_stream(waiting), expected_version=1, owner="alice",
                            events=[deferred[waiting]]),
                AppendBatch(stream=task_stream(bobs), expected_version=1, owner="bob",
                            events=[deferred[bobs]]),
                AppendBatch(stream=cluster_stream, expected_version=None, events=[CapacityObserved(
                    nodes=[NodeCapacity(node_id="abcdef0123456789abcdef0123456789", ip="10.1.2.3",
                                        total_gpus=4, free_gpus=0, total_cpus=16, free_cpus=12),
                           NodeCapacity(node_id="0123456789abcdef0123456789abcdef", ip="10.1.2.4",
                                        total_gpus=4, free_gpus=2, total_cpus=16, free_cpus=6.5)],
                    observed_at=now)]),
            ])
            log = stack.shared_root / "users" / "alice" / "jobs" / run_sid / "driver.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("starting\nstep:1 - loss:1.0\nstep:2 - loss:0.5\n"
                           "(TaskRunner) step:3 - loss:0.2\n")
            yield Glance(stack=stack, running=running, waiting=waiting, failed=failed, bobs=bobs)
        finally:
            server.stop()


class Browsing(Pages):
    """Pages of the glance stack; each waits for the task list to be drawn."""

    def open(self, who: str | None, *, viewport: dict[str, int] = WIDE, scheme: str = "light") -> Any:
        page = super().open(who, viewport=viewport, scheme=scheme)
        page.wait_for_selector("#tasks-table tbody tr[data-task-id]")
        return page


@pytest.fixture
def browsing(browser: Any, glance: Glance) -> Iterator[Browsing]:
    b = Browsing(browser, glance.stack)
    try:
        yield b
        assert not b.errors, f"JavaScript errors on the page: {b.errors}"
    finally:
        b.close()


def shot(page: Any, name: str) -> Path:
    return conftest_shot(page, f"glance-{name}")



def row(page: Any, task_id: str) -> Any:
    return page.locator(f'#tasks-table tr[data-task-id="{task_id}"]')


def test_task_rows_say_name_gpus_age_run_time_progress_and_why(browsing: Browsing, glance: Glance) -> None:
    page = browsing.open("alice")
    heads = page.locator("#tasks-table thead th").all_inner_texts()
    assert heads[:6] == ["Task", "State", "GPUs", "Age", "Ran", "Progress"], heads
    assert "Updated" not in heads and "Submitted" not in heads

    running = row(page, glance.running)
    assert running.locator(".task-name").inner_text() == "tiny toy run"
    assert running.locator(".badge").get_attribute("data-state") == "RUNNING"
    cells = running.locator("td").all_inner_texts()
    assert cells[2] == "2", cells  # GPUs of the gang
    assert re.fullmatch(r"\d+s|\d+m", cells[3]), cells  # age: just submitted
    assert cells[4] == "2m", cells  # started 125 s ago
    assert "3 of 7" in cells[5], cells
    assert running.locator("progress").get_attribute("max") == "7"
    assert running.locator("progress").get_attribute("value") == "3"

    waiting = row(page, glance.waiting)
    assert waiting.locator("td").nth(2).inner_text() == "8"
    why = waiting.locator(".why")
    assert why.inner_text().startswith("no_capacity_per_node: needs 2 nodes with 4 GPUs free")
    assert why.get_attribute("title") == ("no_capacity_per_node: needs 2 nodes with 4 GPUs free; "
                                          "free GPUs per node: [0, 2]")
    assert waiting.locator(".task-name").count() == 0  # no name: nothing beside the id

    failed = row(page, glance.failed)
    assert failed.locator(".badge").get_attribute("data-state") == "FAILED"
    assert failed.locator("td").nth(4).inner_text() == "1m"  # ran 60 s, and stays so
    why = failed.locator(".why")
    assert why.get_attribute("title") == f"USER_ERROR: {LONG_ERROR}"
    shown = why.inner_text()
    assert shown.startswith("USER_ERROR: ModuleNotFoundError") and shown.endswith("…")
    assert len(shown) < len(LONG_ERROR)
    # bob's task is not in alice's list.
    assert row(page, glance.bobs).count() == 0
    shot(page, "tasks-wide")

    # An admin sees the user column second (as before) and everyone's tasks.
    admin = browsing.open("admin")
    heads = admin.locator("#tasks-table thead th").all_inner_texts()
    assert heads[:2] == ["Task", "User"], heads
    assert row(admin, glance.bobs).locator("td").nth(1).inner_text() == "bob"


def test_goodput_on_the_task_page_and_per_user_on_the_cluster_page(browsing: Browsing, glance: Glance) -> None:
    """The failed task held its one GPU for 65 s, all of it failed; the running one (2 GPUs)
    was placed in 5 s; the cluster page shows the user's own row and everyone's."""
    page = browsing.open("alice")
    page.goto(f"{glance.stack.url}/#/tasks/{glance.failed}")
    page.wait_for_selector("#goodput .goodput-head")
    assert page.inner_text("#goodput .goodput-head").startswith("0 % productive: 0 GPU-s of 65 GPU-s held")
    failed = page.locator('#goodput tr[data-category="failed"] td').all_inner_texts()
    assert failed == ["65 GPU-s", "100 %"], failed
    assert page.locator("#goodput svg.goodput-bar rect.goodput-failed").count() == 1
    shot(page, "goodput-task")

    page.goto(f"{glance.stack.url}/#/tasks/{glance.running}")
    page.wait_for_function("() => (document.querySelector('#goodput .goodput-head') || {}).textContent"
                           "?.includes('held')")
    assert page.locator('#goodput tr[data-category="placement"] td').first.inner_text() == "10 GPU-s"

    page.click("a[data-route=cluster]")
    page.wait_for_selector('#goodput-table tr[data-user="alice"]')
    assert page.locator("#goodput-table tbody tr").count() == 2  # her own row, and everyone's
    everyone = page.locator('#goodput-table tr[data-user="all users"] td').all_inner_texts()
    assert everyone[1] == "4", everyone  # alice's 3 tasks and bob's waiting one
    shot(page, "goodput-cluster")
    admin = browsing.open("admin")
    admin.click("a[data-route=cluster]")
    admin.wait_for_selector('#goodput-table tr[data-user="bob"]')


def test_queue_page_shows_position_gpus_waiting_time_and_reason(browsing: Browsing, glance: Glance) -> None:
    page = browsing.open("alice")
    page.click("a[data-route=queue]")
    page.wait_for_selector(f'#queue-table tr[data-task-id="{glance.waiting}"]')
    mine = page.locator(f'#queue-table tr[data-task-id="{glance.waiting}"]')
    cells = mine.locator("td").all_inner_texts()
    assert cells[0].strip().isdigit()
    assert cells[1] == glance.waiting
    assert cells[3].startswith("8") and "2 × 4" in cells[3], cells
    assert re.fullmatch(r"\d+s|\d+m", cells[4]), cells
    assert cells[5].startswith("no_capacity_per_node") and "needs 2 nodes" in cells[5], cells
    # bob's entry is there, anonymised.
    assert "(another user's task)" in page.inner_text("#queue-table")
    # Until the 80 % intervals have learned (a fresh stack), a row shows the expected start,
    # as the task page does, not "—" (here nothing fits by the estimates: the rows' is "—").
    shown = page.evaluate("""async () => {
        const { startsIn } = await import(new URL("js/dom.js", document.baseURI).href);
        const now = Date.now() / 1000;
        return [startsIn({ expected_start: now + 1530 }, now), startsIn({ expected_start: now - 5 }, now),
                startsIn({}, now)].map((el) => [el.textContent, el.title]);
    }""")
    assert shown[0][0] == "~in 25m" and shown[0][1].startswith("expected ~"), shown
    assert shown[1][0] == "any moment" and shown[2][0] == "—", shown
    shot(page, "queue-wide")


def _scheme_luminance(page: Any, selector: str = "body") -> float:
    """Relative luminance (0 black .. 1 white) of the element's effective background."""
    return float(page.evaluate("""(sel) => {
      let el = document.querySelector(sel), bg = "";
      while (el) {
        bg = getComputedStyle(el).backgroundColor;
        if (bg && bg !== "transparent" && !/rgba\\(.*, 0\\)$/.test(bg)) break;
        el = el.parentElement;
      }
      const [r, g, b] = bg.match(/[\\d.]+/g).slice(0, 3).map(Number).map((c) => {
        c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    }""", selector))


ROUTES = ("tasks", "queue", "cluster")


def _goto(page: Any, route: str, glance: Glance) -> None:
    ready = {"tasks": f'#tasks-table tr[data-task-id="{glance.running}"]',
             "queue": f'#queue-table tr[data-task-id="{glance.waiting}"]',
             "cluster": "#nodes-table tbody tr[data-node-id]"}[route]
    page.click(f"a[data-route={route}]")
    page.wait_for_selector(ready)


def _assert_fits(page: Any, route: str, width: int) -> None:
    """No sideways scrolling: not the page, not the table in its box; the nav on screen."""
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{route} at {width} px: the page scrolls sideways ({scroll} px)"
    table = page.evaluate("(() => { const w = document.querySelector('.table-wrap');"
                          " return [w.scrollWidth, w.clientWidth]; })()")
    assert table[0] <= table[1], f"{route} at {width} px: the table scrolls sideways {table}"
    for link in page.locator("#nav a[data-route]:visible").all():
        box = link.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, route
    assert page.locator("#logout").is_visible()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_fit_800px_and_follow_the_colour_scheme(browsing: Browsing, glance: Glance, scheme: str) -> None:
    page = browsing.open("alice", viewport=NARROW, scheme=scheme)
    dark = scheme == "dark"
    for route in ROUTES:
        _goto(page, route, glance)
        _assert_fits(page, route, NARROW["width"])
        body = _scheme_luminance(page)
        assert (body < 0.05) if dark else (body > 0.8), f"{route}: body luminance {body}"
        for sel in ("#main table.data thead th", "#main table.data td"):
            lum = _scheme_luminance(page, sel)
            assert (lum < 0.1) if dark else (lum > 0.7), f"{route} {sel}: luminance {lum}"
        text = page.evaluate("getComputedStyle(document.querySelector('#main h1')).color")
        r, g, b = (int(c) for c in re.findall(r"\d+", text)[:3])
        assert (min(r, g, b) > 180) if dark else (max(r, g, b) < 80), f"{route}: h1 colour {text}"
        shot(page, f"{route}-800-{scheme}")

    # The cluster page: free / total GPUs and CPUs of each node.
    _goto(page, "cluster", glance)
    nodes = page.inner_text("#nodes-table")
    assert "0 free / 4" in nodes and "2 free / 4" in nodes and "12 free / 16" in nodes
    assert "6.5 free / 16" in nodes

    # The long failure wraps (clamped) instead of widening the table; the row stays short;
    # the running task's name is still there, under its id.
    _goto(page, "tasks", glance)
    height = row(page, glance.failed).bounding_box()["height"]
    assert height < 130, height
    assert row(page, glance.running).locator(".task-name").is_visible()


@pytest.mark.parametrize("width", [800, 1024, 1180])
def test_admin_pages_fit_other_widths(browsing: Browsing, glance: Glance, width: int) -> None:
    # An admin has the most to show: the Users link, the admin tag, everyone's tasks.
    page = browsing.open("admin", viewport={"width": width, "height": 800})
    for route in ROUTES:
        _goto(page, route, glance)
        if width == 800:
            shot(page, f"{route}-800-admin")
        _assert_fits(page, route, width)
