"""The SFTP page in a real Chromium: where to connect (the door's real port and host key),
a public key made by ssh-keygen added and shown by its fingerprint, then revoked.
Against the API alone (``start_stack(..., ray=None, sftp=True)``)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import TIMEOUT_MS, login, shot
from tests.sftp.conftest import needs_openssh
from tests.support.stack import Stack, start_stack

pytestmark = [pytest.mark.browser, needs_openssh]


@pytest.fixture(scope="module")
def api_stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="argus-sftp-ui-") as tmp:
        stack, server = start_stack(Path(tmp), ray=None, sftp=True)
        try:
            yield stack
        finally:
            server.stop()


def test_sftp_page_adds_and_revokes_a_key(browser: Any, api_stack: Stack, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@laptop", "-f", str(tmp_path / "id")],
                   check=True)
    public = (tmp_path / "id.pub").read_text()
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "id.pub")], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    door = httpx.get(f"{api_stack.url}/api/v2/sftp", headers={"Authorization": f"Bearer {api_stack.tokens['alice']}"}).json()
    assert door["enabled"] and door["port"] > 0
    ctx = browser.new_context()
    errors: list[str] = []
    try:
        page = ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda d: d.accept())
        page.goto(api_stack.url + "/")
        page.wait_for_selector("#token")
        login(page, api_stack.tokens["alice"])
        page.click("#nav a[data-route=sftp]")
        page.wait_for_selector("#sftp-command")
        assert f"sftp -P {door['port']} alice@" in page.inner_text("#sftp-command")
        assert door["host_key_fingerprint"] in page.inner_text("#sftp-door")
        page.fill("#ssh-key", public)
        page.click("#add-ssh-key button[type=submit]")
        page.wait_for_selector(f"#ssh-keys-table td:has-text('{fingerprint}')")
        assert "alice@laptop" in page.inner_text("#ssh-keys-table")
        shot(page, "sftp-keys")
        page.fill("#ssh-key", (tmp_path / "id").read_text())  # the private key: refused, with why
        page.click("#add-ssh-key button[type=submit]")
        page.wait_for_selector("#sftp-flash .notice-error")
        assert "private key" in page.inner_text("#sftp-flash")
        page.click("#ssh-keys-table button:has-text('Revoke')")
        page.wait_for_selector("#ssh-keys-table td:has-text('revoked')")
    finally:
        ctx.close()
    assert not errors, errors
