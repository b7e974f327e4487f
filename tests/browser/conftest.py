"""Browser test fixtures: Debian's Chromium driven by Playwright (no browser download),
against the real local stack of ``tests/support/stack.py`` (whose Ray cluster is the
session's ``ray_cluster``, registered in tests/conftest.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import Stack

SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
VIEWPORT = {"width": 1280, "height": 860}
TIMEOUT_MS = 15_000


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Package scope: Chromium (and Playwright's event loop in the main thread) closes once the
# last browser test has run, before any pytest-asyncio test that the same process (an
# xdist worker) runs next.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install chromium); browser tests need it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def stack(argus_stack: Stack) -> Stack:
    return argus_stack


class Pages:
    """Opens logged-in pages and collects the JavaScript errors they raise and what the
    Content-Security-Policy blocked."""

    def __init__(self, browser: Any, stack: Stack) -> None:
        self.browser, self.stack = browser, stack
        self.contexts: list[Any] = []
        self.errors: list[str] = []

    def open(self, who: str | None, *, viewport: dict[str, int] = VIEWPORT, scheme: str = "light") -> Any:
        """A page in a new context of this size and colour scheme, logged in as ``who``."""
        ctx = self.browser.new_context(viewport=viewport, color_scheme=scheme)
        self.contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda exc: self.errors.append(f"{who}: {exc}"))
        # The server sends a Content-Security-Policy (argus.api.headers): what it blocks
        # (an inline style, a script from elsewhere) is a defect of the page.
        page.on("console", lambda msg: self.errors.append(f"{who}: {msg.text}")
                if msg.type == "error" and "Content Security Policy" in msg.text else None)
        page.goto(self.stack.url + "/")
        page.wait_for_selector("#token")
        if who is not None:
            login(page, self.stack.tokens[who])
        return page

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()


def login(page: Any, token: str) -> None:
    page.fill("#token", token)
    page.click("form.login button[type=submit]")
    page.wait_for_selector("#nav:not([hidden])")


def shot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def pages(browser: Any, stack: Stack) -> Iterator[Pages]:
    p = Pages(browser, stack)
    try:
        yield p
        assert not p.errors, f"JavaScript errors on the page: {p.errors}"
    finally:
        p.close()
