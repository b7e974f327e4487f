"""The files routes' path parameter: the handler accepts exactly what the document's
pattern says (argus.api.filepath), and '/' may be sent plain or as %2F."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st
from litestar.exceptions import HTTPException

from argus.api.filepath import MAX_CHARS, READ_PATTERN, WRITE_PATTERN, check_path
from tests.api.conftest import Env

_READ, _WRITE = re.compile(READ_PATTERN), re.compile(WRITE_PATTERN)


def _accepted(value: str, write: bool) -> bool:
    try:
        check_path(value, write)
    except HTTPException as exc:
        assert exc.status_code in (400, 404) and exc.detail
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(st.from_regex(WRITE_PATTERN, fullmatch=True))
def test_every_path_the_pattern_allows_is_accepted(value: str) -> None:
    if len(value) <= MAX_CHARS:
        assert _accepted(value, write=True) and _accepted(value, write=False)


_PIECES = st.sampled_from(["datasets", "common/hf", "jobs", "x", "/", "//", ".", "..", "%", "\\",
                           "\x00", "\n", "a" * 255, "é" * 128, "中" * 86, "😀" * 64, "é" * 127])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=6).map("".join) | st.text(max_size=40))
def test_the_handler_accepts_what_the_pattern_matches_and_nothing_else(value: str) -> None:
    assert _accepted(value, write=False) == bool(_READ.fullmatch(value))
    assert _accepted(value, write=True) == bool(_WRITE.fullmatch(value))


@pytest.mark.parametrize("value, words", [
    ("datasets//x", "empty component"), ("datasets/../x", "'..'"), ("/datasets/x", "relative"),
    ("datasets/a%b", "'%'"), ("datasets/" + "é" * 128, "255 bytes"), ("datasets", "not the area"),
    ("datasets/" + "/".join("a" * 65), "too deep"),
])
def test_refusals_say_what_to_change(value: str, words: str) -> None:
    with pytest.raises(HTTPException) as exc:
        check_path(value, write=True)
    assert exc.value.status_code == 400 and words in exc.value.detail


async def test_an_encoded_slash_is_a_separator(env: Env) -> None:
    h = env.h("alice")
    r = await env.client.put("/api/v2/files/datasets%2Ftoy%2Ftrain.jsonl", content=b"{}\n", headers=h)
    assert r.status_code == 201, r.text
    assert (env.shared / "users/alice/datasets/toy/train.jsonl").read_bytes() == b"{}\n"
    r = await env.client.get("/api/v2/files/datasets/toy/train.jsonl", headers=h)
    assert r.status_code == 200 and r.content == b"{}\n"
    r = await env.client.get("/api/v2/files/datasets%2Ftoy", headers=h)
    assert [e["name"] for e in r.json()["entries"]] == ["train.jsonl"]
    r = await env.client.delete("/api/v2/files/datasets%2Ftoy%2Ftrain.jsonl", headers=h)
    assert r.status_code == 200, r.text
    assert not (env.shared / "users/alice/datasets/toy/train.jsonl").exists()
    for bad in ("datasets%2F%2Fx", "datasets%2F..%2Fx", "datasets%2Fa%25b"):
        r = await env.client.put(f"/api/v2/files/{bad}", content=b"x", headers=h)
        assert r.status_code == 400 and r.json()["detail"], (bad, r.text)
