"""The WebUI in a real Chromium against a real local stack (API + reactor + Ray).

Screenshots of every page go to artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Route

from tests.browser.conftest import Pages, login, shot
from tests.support.stack import REACTOR_ERRORS, Stack

pytestmark = pytest.mark.browser

INVALID_SPEC = """\
kind: advanced
workload: ppo
nnodes: 0
n_gpus_per_node: 1
command: python3 -m argus.examples.toy_trainer
"""

BAD_PATH_SPEC = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 1
command: |
  python3 -m argus.examples.toy_trainer data.train_files=/private/users/bob/datasets/x.jsonl
"""


# A command pasted as verl publishes its scripts (comments, set -x, an export, one command
# continued over lines), running the example trainer on the toy dataset.
TOY_SCRIPT_SPEC = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 2
command: |
  # the example trainer, verl-style overrides
  export PYTHONUNBUFFERED=1

  python3 -m argus.examples.toy_trainer \\
    data.train_files=$HOME/datasets/toy/train.jsonl \\
    trainer.nnodes=1 \\
    trainer.n_gpus_per_node=2 \\
    trainer.total_training_steps=20 \\
    +ray_kwargs.ray_init.address=auto
"""


def put_toy_dataset(stack: Stack, user: str) -> None:
    d = stack.shared_root / "users" / user / "datasets" / "toy"
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.jsonl").write_text(
        "".join(f'{{"prompt": "{i}+{i}=", "answer": "{2 * i}"}}\n' for i in range(32)))


def toy_spec(*, nnodes: int = 1, gpus: int = 1, workload: str = "ppo", extra: str = "") -> str:
    """An advanced spec running the example trainer on the toy dataset (put_toy_dataset)."""
    return (f"kind: advanced\nworkload: {workload}\nnnodes: {nnodes}\nn_gpus_per_node: {gpus}\n"
            f"command: python3 -m argus.examples.toy_trainer trainer.nnodes={nnodes} "
            f"trainer.n_gpus_per_node={gpus} data.train_files=$HOME/datasets/toy/train.jsonl{extra}\n")


def submit(c: Any, spec: str) -> str:
    """POST a spec as ``c``'s user; the new task's id."""
    r = c.post("/api/v2/tasks", content=spec, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["task_id"])


def row_state(page: Any, task_id: str) -> str:
    return page.get_attribute(f'#tasks-table tr[data-task-id="{task_id}"] .badge', "data-state") or ""


def test_login_logout_and_session_cookie(pages: Pages, stack: Stack) -> None:
    page = pages.open(None)
    shot(page, "01-login")
    page.fill("#token", "not-a-real-token")
    page.click("form.login button[type=submit]")
    page.wait_for_selector("#login-error .notice-error")
    assert "not accepted" in page.inner_text("#login-error")

    login(page, stack.tokens["alice"])
    page.wait_for_selector("#tasks-table")
    assert page.inner_text("#whoami").startswith("Alice")
    # The session is an HttpOnly cookie; the token is in no URL and no storage.
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["argus_session"]["httpOnly"] is True
    token = stack.tokens["alice"]
    assert token not in page.url
    assert token not in page.evaluate("JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    assert page.locator("a[data-route=users]").is_hidden()  # not an admin

    page.click("#logout")
    page.wait_for_selector("#token")
    assert page.locator("#nav").is_hidden()
    page.goto(stack.url + "/#/tasks")
    page.wait_for_selector("#token")  # the cookie is gone: back to the login page


def test_invalid_spec_shows_the_servers_message_inline(pages: Pages, stack: Stack) -> None:
    put_toy_dataset(stack, "alice")  # the spec below names it; a missing file is an error
    page = pages.open("alice")
    page.click("a[data-route=new]")
    page.wait_for_selector("#spec-editor")
    # (The default template is verl's GRPO example: this stack has no gsm8k for it.)
    page.fill("#spec-editor", toy_spec())
    page.wait_for_selector("#check-result .notice-ok")  # a valid spec says so
    shot(page, "03-new-task")

    page.fill("#spec-editor", INVALID_SPEC)
    page.wait_for_selector("#spec-errors li")  # checked as you type (POST /tasks/validate)
    errors = page.inner_text("#spec-errors")
    assert "nnodes" in errors and "1 to" in errors, errors

    # Not YAML at all (a 400 from /tasks/validate): shown inline the same way.
    page.fill("#spec-editor", "kind: [advanced\n")
    page.wait_for_selector("#spec-errors li:has-text('not valid YAML')")

    page.fill("#spec-editor", BAD_PATH_SPEC)
    page.wait_for_selector("#spec-errors li:has-text('bob')")
    page.click("#submit-task")
    page.wait_for_selector("#submit-error")
    message = page.inner_text("#check-result")
    assert "Not submitted" in message and "bob" in message, message
    assert page.evaluate("location.hash") == "#/tasks/new"  # nothing was created
    shot(page, "04-new-task-invalid")


def test_a_user_cannot_see_another_users_task(pages: Pages, stack: Stack) -> None:
    put_toy_dataset(stack, "bob")  # a spec naming a file that does not exist is refused
    with stack.client("bob") as bob:
        r = bob.post("/api/v2/tasks", content=INVALID_SPEC.replace("nnodes: 0", "nnodes: 1")
                     .replace("trainer", "trainer data.train_files=$HOME/datasets/toy/train.jsonl"),
                     headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        bobs = r.json()["task_id"]
    page = pages.open("alice")
    page.goto(f"{stack.url}/#/tasks/{bobs}")
    page.wait_for_selector("[data-testid=not-found]")
    assert bobs in page.inner_text("main")
    assert page.locator("#tasks-table").count() == 0
    shot(page, "08-not-found")
    # Not in alice's list either.
    page.click("a[data-route=tasks]")
    page.wait_for_selector("#tasks-table")
    assert page.locator(f'tr[data-task-id="{bobs}"]').count() == 0
    # An unknown route is the same page.
    page.goto(f"{stack.url}/#/no/such/page")
    page.wait_for_selector("[data-testid=not-found]")


def test_upload_a_file_on_the_data_page(pages: Pages, stack: Stack, tmp_path: Path) -> None:
    page = pages.open("alice")
    page.click("a[data-route=data]")
    page.wait_for_selector("#upload-form")
    page.goto(f"{stack.url}/#/data/datasets/uploads")
    page.wait_for_selector("#upload-form label:has-text('$HOME/datasets/uploads/')")
    body = b"".join(b'{"prompt": "%d", "answer": "%d"}\n' % (i, i) for i in range(20_000))
    page.set_input_files("#upload-file", files=[{"name": "web upload.jsonl",
                                                 "mimeType": "application/octet-stream",
                                                 "buffer": body}])
    page.click("#upload-form button[type=submit]")
    row = page.wait_for_selector('#files-table tr[data-name="web upload.jsonl"]')
    assert "KiB" in row.inner_text()
    assert "Uploaded web upload.jsonl" in page.inner_text("main")
    assert page.get_attribute("#upload-progress", "value") == "100"  # XHR upload progress
    assert page.is_visible("#upload-progress")
    href = page.get_attribute('#files-table tr[data-name="web upload.jsonl"] a.file', "href")
    assert href == "/api/v2/files/datasets/uploads/web%20upload.jsonl"
    stored = stack.shared_root / "users" / "alice" / "datasets" / "uploads" / "web upload.jsonl"
    assert stored.read_bytes() == body
    shot(page, "07-data")
    # Shared folders are read-only: no upload form there.
    page.click("nav.tabs a:has-text('common/datasets')")
    page.wait_for_selector("nav.tabs a[aria-current=page]:has-text('common/datasets')")
    assert page.locator("#upload-form").count() == 0
    # Delete it again.
    page.goto(f"{stack.url}/#/data/datasets/uploads")
    page.once("dialog", lambda d: d.accept())
    page.click('#files-table tr[data-name="web upload.jsonl"] button:has-text("Delete")')
    page.wait_for_selector("text=Deleted web upload.jsonl")
    assert not stored.exists()


def test_admin_users_page_issues_a_token_once(pages: Pages, stack: Stack) -> None:
    page = pages.open("admin")
    page.click("a[data-route=users]")
    page.wait_for_selector('#users-table tr[data-user="alice"]')
    page.fill("#new-user-id", "carol")
    page.fill("#new-user-name", "Carol")
    page.click("#create-user button[type=submit]")
    page.wait_for_selector('#users-table tr[data-user="carol"]')
    # A new user's limits: priority 0 at most, tasks preemptible (argus users set changes them)
    assert page.inner_text('#users-table tr[data-user="carol"] td.limits') == "priority ≤ 0, preemptible"
    page.fill("#token-label", "laptop")
    page.click("#issue-token button[type=submit]")
    token = page.input_value("#new-token", timeout=10_000)
    assert len(token) >= 20
    shot(page, "09-users")
    # An admin sees everyone's tasks and can narrow them to one user.
    page.click("a[data-route=tasks]")
    page.wait_for_selector("h1:has-text('All tasks')")
    page.fill("#filter-user", "alice")
    page.press("#filter-user", "Enter")
    page.wait_for_selector("h1:has-text('Tasks of alice')")
    page.wait_for_selector("#tasks-table")
    users = page.locator("#tasks-table tbody tr[data-task-id] td:nth-child(2)").all_inner_texts()
    assert set(users) <= {"alice"}, users
    # The new token logs carol in, in a fresh browser context.
    other = pages.open(None)
    login(other, token)
    assert other.inner_text("#whoami").startswith("Carol")


def test_submit_advanced_task_and_follow_it_live(pages: Pages, stack: Stack) -> None:
    put_toy_dataset(stack, "alice")
    page = pages.open("alice")
    page.evaluate("window.__noReload = 'same page'")
    page.click("a[data-route=new]")
    # The page opens on the advanced template: verl's GRPO example in script form. This stack
    # has no gsm8k yet, and the check says where to put it: the Data page.
    page.wait_for_selector("#check-result .notice-error")
    assert "python3 -m verl.trainer.main_ppo \\" in page.input_value("#spec-editor")
    assert "Data page" in page.inner_text("#check-result")
    # A template still loading when the user starts typing never overwrites what they typed
    # (a slow host once dropped the pasted spec this way): the fetch is held until after.
    held: list[Route] = []
    page.route("**/templates/advanced.yaml", lambda route: held.append(route))
    page.click("button[data-template=advanced]")
    while not held:
        page.wait_for_timeout(50)
    # Pasted in the same form, the example trainer runs here in seconds.
    page.fill("#spec-editor", TOY_SCRIPT_SPEC)
    held[0].continue_()
    page.unroute("**/templates/advanced.yaml")
    page.wait_for_selector("#check-result .notice-ok")
    assert page.input_value("#spec-editor") == TOY_SCRIPT_SPEC
    page.click("#submit-task")
    page.wait_for_url(re.compile(r".*#/tasks/alice-ppo-"))
    task_id = page.evaluate("decodeURIComponent(location.hash.split('/')[2])")

    # The Tasks page follows the task through its states without a reload.
    page.click("a[data-route=tasks]")
    page.wait_for_selector(f'#tasks-table tr[data-task-id="{task_id}"]')
    seen = [row_state(page, task_id)]
    deadline_ms = 90_000
    waited = 0
    while seen[-1] not in ("SUCCEEDED", "FAILED", "CANCELED") and waited < deadline_ms:
        page.wait_for_timeout(200)
        waited += 200
        state = row_state(page, task_id)
        if state != seen[-1]:
            seen.append(state)
    shot(page, "02-tasks")
    if seen[-1] != "SUCCEEDED":
        with stack.client("alice") as c:
            detail = c.get(f"/api/v2/tasks/{task_id}").text
        pytest.fail(f"states seen on the Tasks page: {seen}; reactor errors: {REACTOR_ERRORS}; "
                    f"task: {detail}")
    assert len(seen) >= 2, seen
    assert page.evaluate("window.__noReload") == "same page"

    # The detail page: timeline, log, progress chart, spec.
    page.click(f'#tasks-table tr[data-task-id="{task_id}"] a')
    page.wait_for_selector("#task-state [data-state=SUCCEEDED]")
    page.wait_for_selector("#timeline tr[data-type=TaskSucceeded]")
    for t in ("TaskSubmitted", "AttemptStarting", "AttemptSubmitted"):
        assert page.locator(f"#timeline tr[data-type={t}]").count() == 1, t
    page.wait_for_function("() => document.querySelector('#log').textContent.includes('step')")
    page.wait_for_selector("#progress svg.chart polyline")
    assert "Step 20" in page.inner_text("#steps")
    assert "toy_trainer" in page.inner_text("#spec-raw")
    assert "for its driver)" in page.inner_text("#main")  # CPUs per node as wait reasons count them
    assert str(stack.shared_root) in page.inner_text("#spec-command")  # $HOME expanded
    assert page.locator("#attempts-table tbody tr").count() >= 1
    # Goodput: the GPU time it held and where it went, a bar and a row per category.
    assert "held" in page.inner_text("#goodput .goodput-head")
    assert page.locator("#goodput svg.goodput-bar rect").count() >= 1
    assert page.locator("#goodput tr[data-category]").count() == 7
    shot(page, "05-task-detail")

    page.click("a[data-route=cluster]")
    page.wait_for_selector("#nodes-table tbody tr[data-node-id]")
    # Capacity is recorded when it changes: said as such, not as the last look.
    assert "Capacity changed" in page.inner_text("#main") and "Observed" not in page.inner_text("#main")
    # Goodput per user (alice sees her own row) and the cluster's.
    page.wait_for_selector('#goodput-table tr[data-user="alice"]')
    assert page.locator('#goodput-table tr[data-user="all users"]').count() == 1
    assert page.locator('#goodput-table tbody tr').count() == 2
    shot(page, "10-cluster")


def test_a_page_that_finishes_loading_late_does_not_draw_over_the_next(pages: Pages, stack: Stack) -> None:
    """A task's page is still waiting for the API when the user moves to the Tasks list: when
    its answer comes, the list stays (each navigation renders into a view of its own).
    Before, the late task page replaced the list just opened (seen in CI as a just-submitted
    task missing from the Tasks page for 15 s)."""
    put_toy_dataset(stack, "alice")
    with stack.client("alice") as c:
        task_id = submit(c, toy_spec(extra=" trainer.total_training_steps=2"))
    page = pages.open("alice")
    held: list[Any] = []
    page.route(f"**/api/v2/tasks/{task_id}", lambda route: held.append(route))  # held: the task page's first request
    page.evaluate(f"location.hash = '#/tasks/{task_id}'")
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the task page never asked for its task"
    page.click("a[data-route=tasks]")
    page.wait_for_selector(f'#tasks-table tr[data-task-id="{task_id}"]')
    held[0].continue_()  # the task page's answer arrives now, late
    page.wait_for_timeout(1000)
    assert page.locator("#tasks-table").count() == 1
    assert page.locator("#task-state").count() == 0  # nothing of the task page was drawn
    with stack.client("alice") as c:  # leave alice nothing running for the tests after
        c.post(f"/api/v2/tasks/{task_id}/cancel")
        deadline = time.monotonic() + 60
        while c.get(f"/api/v2/tasks/{task_id}").json()["state"] not in ("SUCCEEDED", "FAILED", "CANCELED"):
            assert time.monotonic() < deadline, "the task did not end"
            time.sleep(0.3)


def test_waiting_task_shows_its_reason_and_can_be_canceled(pages: Pages, stack: Stack) -> None:
    put_toy_dataset(stack, "alice")
    # A gang that fits the cluster (2 workers x 4 GPUs) but not while another task holds a
    # GPU: it waits with a reason. (A gang no node could hold is refused at submit.)
    blocker = toy_spec(extra=" trainer.total_training_steps=300 +trainer.step_sleep_s=0.2")
    whole = toy_spec(nnodes=2, gpus=4, workload="grpo")
    with stack.client("alice") as c:
        blocker_id = submit(c, blocker)
        deadline = time.monotonic() + 60
        while c.get(f"/api/v2/tasks/{blocker_id}").json()["state"] != "RUNNING":
            assert time.monotonic() < deadline, "the blocker never ran"
            time.sleep(0.3)
        task_id = submit(c, whole)
    page = pages.open("alice")
    page.goto(f"{stack.url}/#/tasks/{task_id}")
    page.wait_for_selector("#waiting h2:has-text('Why is it waiting?')")
    # The scheduler records why: 2 whole nodes wanted, one GPU is taken.
    page.wait_for_selector("#task-state [data-state=PENDING_RESOURCES]")
    page.wait_for_function("() => !document.querySelector('#waiting').textContent.includes('not looked at')")
    shot(page, "11-task-waiting")
    page.click("a[data-route=queue]")
    page.wait_for_selector(f'#queue-table tr[data-task-id="{task_id}"]')
    # Her standing under fair share: her row only (the blocker runs, this task waits).
    page.wait_for_selector('#shares-table tr[data-user="alice"]')
    assert page.locator("#shares-table tbody tr").count() == 1
    cells = page.locator('#shares-table tr[data-user="alice"] td').all_inner_texts()
    assert cells[5:7] == ["1", "1"], cells  # running, waiting
    shot(page, "06-queue")
    page.go_back()
    page.wait_for_selector("#cancel-task")
    page.click("#cancel-task")
    page.wait_for_selector("#cancel-dialog[open]")
    page.keyboard.press("Escape")  # the dialog closes without canceling
    page.wait_for_selector("#cancel-dialog", state="hidden")
    assert page.get_attribute("#task-state .badge", "data-state") != "CANCELED"
    page.click("#cancel-task")
    page.click("#confirm-cancel")
    page.wait_for_selector("#task-state [data-state=CANCELED]")
    page.wait_for_selector("#timeline tr[data-type=TaskCanceled]")
    with stack.client("alice") as c:
        assert c.post(f"/api/v2/tasks/{blocker_id}/cancel").status_code == 200
    assert page.is_hidden("#cancel-task")
