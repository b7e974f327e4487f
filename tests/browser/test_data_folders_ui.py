"""The Data page's folders in a real Chromium: a folder uploaded with its tree (resumable
tus chunks, progress), a new folder made, a folder deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.conftest import Pages, shot
from tests.support.stack import Stack

pytestmark = pytest.mark.browser


def test_upload_a_folder_make_one_and_delete_it(pages: Pages, stack: Stack, tmp_path: Path) -> None:
    tree = tmp_path / "gsm8k"
    (tree / "sub").mkdir(parents=True)
    big = bytes(range(256)) * (80 * 1024)  # 20 MiB: two chunks
    (tree / "train.bin").write_bytes(big)
    (tree / "sub" / "test.jsonl").write_text('{"q": 1}\n')
    page = pages.open("alice")
    page.goto(f"{stack.url}/#/data/datasets/trees")
    page.wait_for_selector("#upload-form label:has-text('$HOME/datasets/trees/')")
    page.wait_for_selector("#storage-usage:has-text('Your storage:')")
    page.set_input_files("#upload-folder", str(tree))
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("text=Uploaded", timeout=60_000)
    assert page.get_attribute("#upload-progress", "value") == "100"
    root = stack.shared_root / "users" / "alice" / "datasets" / "trees" / "gsm8k"
    assert (root / "train.bin").read_bytes() == big
    assert (root / "sub" / "test.jsonl").read_text() == '{"q": 1}\n'
    assert not list((stack.shared_root / ".uploads" / "alice").iterdir())
    page.wait_for_selector('#files-table tr[data-name="gsm8k"][data-type="dir"]')
    shot(page, "07b-data-folder")
    # A new folder.
    page.once("dialog", lambda d: d.accept("empty-one"))
    page.click("#new-folder")
    page.wait_for_selector('#files-table tr[data-name="empty-one"]')
    assert (root.parent / "empty-one").is_dir()
    # Delete the uploaded folder, tree and all.
    page.once("dialog", lambda d: d.accept())
    page.click('#files-table tr[data-name="gsm8k"] button:has-text("Delete")')
    page.wait_for_selector("text=Deleted gsm8k")
    assert not root.exists()
