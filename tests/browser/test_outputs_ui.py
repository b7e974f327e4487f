"""Outputs within reach, in a real Chromium: the Data page's read-only jobs area lists an
attempt's folder (written on disk here, as a job leaves it) and downloads from it; the
task page links that folder, its driver.log and metrics, and the attempt's Ray job; the
pages show this deployment's real paths, never ``/private``.

Against the API alone (``start_stack(..., ray=None)``): the task is submitted through the
API, and the reactor's part (its attempt starting and succeeding) is appended as events by
a second writer on the same database. Screenshots: artifacts/screenshots/outputs-*.png.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from argus.events import (
    AttemptEnded, AttemptRunning, AttemptStarting, SubmissionPayload, TaskSucceeded, task_stream,
)
from argus.store import AppendBatch
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, login
from tests.browser.test_glance_ui import _append, _submit, spec
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.browser

LOG = "starting\nstep:1 - loss:1.0\nstep:2 - loss:0.5\n"
METRICS = '{"step": 1, "data": {"loss": 1.0}}\n{"step": 2, "data": {"loss": 0.5}}\n'
DASHBOARD = "http://127.0.0.1:8265"


class Outputs(msgspec.Struct, kw_only=True):
    stack: Stack
    task_id: str
    sid: str


@pytest.fixture(scope="module")
def outputs() -> Iterator[Outputs]:
    with tempfile.TemporaryDirectory(prefix="argus-outputs-") as tmp:
        stack, server = start_stack(Path(tmp), ray=None)
        try:
            home = stack.shared_root / "users" / "alice"
            (home / "datasets" / "toy").mkdir(parents=True, exist_ok=True)
            (home / "datasets" / "toy" / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
            task_id = _submit(stack, "alice", spec(steps=2))
            sid = f"{task_id}--a01"
            now = time.time()
            payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                        entrypoint_resources={}, runtime_env={}, metadata={})
            _append(stack, [AppendBatch(stream=task_stream(task_id), expected_version=1,
                                        owner="alice", events=[
                AttemptStarting(task_id=task_id, attempt_no=1, submission_id=sid,
                                payload=payload, decided_at=now - 60),
                AttemptRunning(task_id=task_id, attempt_no=1, submission_id=sid, started_at=now - 55),
                AttemptEnded(task_id=task_id, attempt_no=1, submission_id=sid,
                             ray_status="SUCCEEDED", exit_code=0, ended_at=now - 5),
                TaskSucceeded(task_id=task_id, attempt_no=1, finished_at=now - 5)])])
            # The attempt's folder as the driver and the trainer leave it.
            job = home / "jobs" / sid
            (job / "checkpoints" / "global_step_2").mkdir(parents=True)
            (job / "checkpoints" / "global_step_2" / "model.pt").write_bytes(b"\0" * 2048)
            (job / "driver.log").write_text(LOG)
            (job / "metrics.jsonl").write_text(METRICS)
            (job / "result.json").write_text('{"exit_code": 0}\n')
            (job / "planted").symlink_to("/etc/passwd")  # what a job could leave behind
            # The head's discovery record: how the API knows the Ray dashboard's address.
            head = stack.config.discovery_file()
            head.parent.mkdir(parents=True, exist_ok=True)
            head.write_text(json.dumps({"cluster_name": "argus-ray", "head_ip": "127.0.0.1",
                                        "gcs_port": 6379, "dashboard_port": 8265,
                                        "job_server_url": DASHBOARD}))
            yield Outputs(stack=stack, task_id=task_id, sid=sid)
        finally:
            server.stop()


@pytest.fixture
def open_page(browser: Any, outputs: Outputs) -> Iterator[Any]:
    contexts: list[Any] = []
    errors: list[str] = []

    def open_(who: str, hash_: str) -> Any:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda exc: errors.append(f"{who}: {exc}"))
        page.goto(outputs.stack.url + "/")
        page.wait_for_selector("#token")
        login(page, outputs.stack.tokens[who])
        page.goto(outputs.stack.url + "/" + hash_)
        return page

    try:
        yield open_
        assert not errors, f"JavaScript errors on the page: {errors}"
    finally:
        for ctx in contexts:
            ctx.close()


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"outputs-{name}.png"), full_page=True)


def test_data_page_lists_and_downloads_a_job_folder(open_page: Any, outputs: Outputs) -> None:
    shared, sid = outputs.stack.shared_root, outputs.sid
    page = open_page("alice", "#/data/jobs")
    page.wait_for_selector(f'#files-table tr[data-name="{sid}"][data-type=dir]')
    assert page.locator("#upload-form").count() == 0  # read-only: no upload
    assert page.inner_text("#disk-path") == f"{shared}/users/alice/jobs"
    page.click(f'#files-table tr[data-name="{sid}"] a.dir')
    page.wait_for_selector('#files-table tr[data-name="driver.log"]')
    names = page.locator("#files-table tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.name, r.dataset.type])")
    assert names == [["checkpoints", "dir"], ["driver.log", "file"], ["metrics.jsonl", "file"],
                     ["planted", "link"], ["result.json", "file"]]
    assert page.inner_text("#disk-path") == f"{shared}/users/alice/jobs/{sid}"
    # The planted link is listed, neither offered for download nor for deletion; what the
    # finished task wrote may be deleted by its owner (docs/data.md).
    assert page.locator('#files-table tr[data-name="planted"] a').count() == 0
    assert page.locator('#files-table tr[data-name="planted"] button').count() == 0
    assert page.locator("#files-table button:has-text('Delete')").count() == 4
    help_text = page.inner_text(".help-box")
    assert f"{shared}/users/alice" in help_text and "/private" not in help_text
    shot(page, "data-jobs")

    with page.expect_download() as info:
        page.click('#files-table tr[data-name="driver.log"] a.file')
    assert Path(info.value.path()).read_text() == LOG
    assert info.value.suggested_filename == "driver.log"

    page.click('#files-table tr[data-name="checkpoints"] a.dir')
    page.wait_for_selector('#files-table tr[data-name="global_step_2"]')


def test_task_page_links_its_outputs(open_page: Any, outputs: Outputs) -> None:
    sid = outputs.sid
    page = open_page("alice", f"#/tasks/{outputs.task_id}")
    page.wait_for_selector("#task-state [data-state=SUCCEEDED]")
    row = f'#outputs-table tr[data-submission-id="{sid}"]'
    page.wait_for_selector(f"{row} a[data-output=metrics]")
    assert page.get_attribute(f"{row} a[data-output=browse]", "href") == f"#/data/jobs/{sid}"
    assert page.get_attribute(f'{row} a[data-output="driver.log"]', "href") == \
        f"/api/v2/files/jobs/{sid}/driver.log"
    assert page.get_attribute(f"{row} a[data-output=metrics]", "href") == \
        f"/api/v2/files/jobs/{sid}/metrics.jsonl"
    assert page.get_attribute(f"{row} a[data-output=ray]", "href") == f"{DASHBOARD}/#/jobs/{sid}"
    assert f"{outputs.stack.shared_root}/users/alice/jobs/{sid}/" in page.inner_text(row)
    shot(page, "task")

    with page.expect_download() as info:
        page.click(f"{row} a[data-output=metrics]")
    assert Path(info.value.path()).read_text() == METRICS

    page.click(f"{row} a[data-output=browse]")
    page.wait_for_selector('#files-table tr[data-name="metrics.jsonl"]')
    assert page.url.endswith(f"#/data/jobs/{sid}")


def test_admin_sees_where_another_users_outputs_are(open_page: Any, outputs: Outputs) -> None:
    sid = outputs.sid
    page = open_page("admin", f"#/tasks/{outputs.task_id}")
    row = f'#outputs-table tr[data-submission-id="{sid}"]'
    page.wait_for_selector(f"{row} a[data-output=ray]")
    assert f"{outputs.stack.shared_root}/users/alice/jobs/{sid}/" in page.inner_text(row)
    assert page.locator(f"{row} a[data-output=browse]").count() == 0  # not the admin's files
    assert "only alice can browse them" in page.inner_text("#outputs")


def test_templates_show_this_deployments_paths(open_page: Any, outputs: Outputs) -> None:
    page = open_page("alice", "#/tasks/new?template=advanced")
    page.wait_for_selector("#check-result .notice")  # checked (the stack has no gsm8k: an error)
    text = page.input_value("#spec-editor")
    shared = str(outputs.stack.shared_root)
    assert f"-> {shared}/users/alice/" in text and f"-> {shared}/datasets/" in text
    assert "/private" not in text and "<shared>" not in text
    assert f"{shared}/users/alice" in page.inner_text("#spec-help")
    page.click("button[data-template=ppo]")
    page.wait_for_function("() => document.querySelector('#spec-editor').value.startsWith('# PPO')")
    text = page.input_value("#spec-editor")
    assert f"{shared}/users/alice" in text and "/private" not in text
