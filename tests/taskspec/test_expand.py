"""$HOME macro expansion (docs/taskspec.md), in its fixed order."""

from __future__ import annotations

import pytest

from argus.taskspec import expand_home

ROOT = "/private"


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$HOME/common/datasets/gsm8k/a.parquet", "/private/datasets/gsm8k/a.parquet"),
        ("$HOME/common/hf/Qwen", "/private/hf/Qwen"),
        ("$HOME/common/datasets", "/private/datasets"),
        ("$HOME/datasets/x", "/private/users/alice/datasets/x"),
        ("$HOME/common/other/x", "/private/users/alice/common/other/x"),
        ("${HOME}/code/r.py", "/private/users/alice/code/r.py"),
        ("${HOME}/common/hf/x", "/private/hf/x"),
        ("$HOME", "/private/users/alice"),
        ("a=$HOME/x,b=$HOME/common/hf/y", "a=/private/users/alice/x,b=/private/hf/y"),
        ("'$HOME/q'", "'/private/users/alice/q'"),
        # Not the macro: bash would read a different variable; left for the checks.
        ("$HOMEX/x", "$HOMEX/x"),
        ("$HOME_DIR/x", "$HOME_DIR/x"),
        ("${HOMEX}/x", "${HOMEX}/x"),
        # A longer folder name is not the shared folder.
        ("$HOME/common/datasets-x/a", "/private/users/alice/common/datasets-x/a"),
        ("$HOME/common/hfx", "/private/users/alice/common/hfx"),
        ("${HOME}/../bob", "/private/users/alice/../bob"),
        ("a \\\r\n b", "a \\\n b"),
    ],
)
def test_expand_home(text: str, expanded: str) -> None:
    assert expand_home(text, user="alice", shared_root=ROOT) == expanded


def test_shared_root_with_trailing_slash_and_regex_characters() -> None:
    assert expand_home("$HOME/x", user="a", shared_root="/mnt/s\\1/") == "/mnt/s\\1/users/a/x"
    assert expand_home("$HOME/common/hf", user="a", shared_root="/r/") == "/r/hf"
