"""The Teams page (admin) and the Usage page in a real Chromium: an admin creates a team,
moves alice into it and sets a quota, each through the page's forms; alice sees her
GPU-hours as bars of the usage chart and in its table, and no Teams page."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from argus.events import task_stream
from projections import open_store
from tests.browser.conftest import Pages, shot
from tests.events import factories as f
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def api_stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="argus-teams-ui-") as tmp:
        stack, server = start_stack(Path(tmp), ray=None)
        try:
            yield stack
        finally:
            server.stop()


def _alice_ran_two_hours(stack: Stack) -> None:
    """A finished task of alice's: 4 GPUs for two hours, ended an hour ago."""
    tid, now = "alice-ppo-20260101-000000-0e0e", time.time()

    async def record() -> None:
        store = await open_store(stack.config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            await store.append(task_stream(tid), 0, [
                f.submitted(tid, "alice", at=now - 4 * 3600), f.starting(tid, at=now - 3 * 3600),
                f.running(tid, at=now - 3 * 3600), f.ended(tid, at=now - 3600), f.succeeded(tid, at=now - 3600)],
                owner="alice")
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop
        pool.submit(asyncio.run, record()).result()


def test_teams_page_changes_teams_and_usage_page_charts_gpu_hours(browser: Any, api_stack: Stack) -> None:
    _alice_ran_two_hours(api_stack)
    pages = Pages(browser, api_stack)
    try:
        page = pages.open("admin")
        page.click("#nav a[data-route=teams]")
        page.wait_for_selector("#create-team")
        page.fill("#new-team-id", "vision")
        page.fill("#new-team-share", "2")
        page.click("#create-team button[type=submit]")
        page.wait_for_selector("#teams-table tr[data-team=vision]")
        page.fill("#move-user", "alice")
        page.fill("#move-team", "vision")
        page.click("#move-member button[type=submit]")
        page.wait_for_selector("#teams-table tr[data-team=vision] td.members:has-text('alice')")
        page.fill("#quota-team", "vision")
        page.fill("#quota-model", "A100")
        page.fill("#quota-nominal", "8")
        page.fill("#quota-lend", "2")
        page.click("#set-quota button[type=submit]")
        page.wait_for_selector("#teams-table tr[data-team=vision] li:has-text('A100: 8 / no limit / 2')")
        page.fill("#move-team", "ghost")  # a team that does not exist: refused, with why
        page.fill("#move-user", "alice")
        page.click("#move-member button[type=submit]")
        page.wait_for_selector("#teams-flash:has-text('ghost')")
        shot(page, "teams")

        alice = pages.open("alice")
        assert not alice.is_visible("#nav a[data-route=teams]")
        alice.click("#nav a[data-route=usage]")
        alice.wait_for_selector("#usage-chart rect.usage-bar[data-key=alice]")
        held = float(alice.inner_text("#usage-table tbody tr[data-key=alice] >> nth=-1 >> td >> nth=2"))
        total = sum(float(alice.inner_text(f"#usage-table tbody tr[data-key=alice] >> nth={i} >> td >> nth=2"))
                    for i in range(alice.locator("#usage-table tbody tr").count()))
        assert held > 0 and total == pytest.approx(8.0, abs=0.02), total  # 4 GPUs x 2 h, over one or two days
        alice.select_option("#usage-by", "team")
        alice.click("#usage-form button[type=submit]")
        alice.wait_for_selector("#usage-table tbody tr[data-key=vision]")
        shot(alice, "usage")
        assert not pages.errors, pages.errors
    finally:
        pages.close()
