"""Issue 23, items 1 and 3: what a user's own job can plant cannot redirect the server.

Alice's job (same Unix user as everyone's) replaces her ``code/`` or ``models/`` area root,
a folder, a file or her ``driver.log`` with a symlink into Bob's home: every files, logs
and progress request through it is a 4xx that names the link, and nothing of Bob's is
read, written or deleted. Deep paths and a file used as a folder are 4xx, not 500. And one
request's work is bounded: a 32 MiB line-less log tails in well under a second, a 2 GiB
sparse metrics file leaves the server's RSS flat.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from argus.api import jobfiles, logread
from tests.api.conftest import Env
from tests.api.test_jobs_area import BOB_SID, SECRET, _with_attempt, make_job, snapshot

BOB_CODE = b"def compute_score(**kw): return 'bob'\n"


def plant(env: Env) -> tuple[Path, Path]:
    """Bob's home with files; Alice's home (made by the API). Returns both."""
    bob, alice = env.shared / "users/bob", env.shared / "users/alice"
    (bob / "code").mkdir(parents=True, exist_ok=True)
    (bob / "code/reward.py").write_bytes(BOB_CODE)
    (bob / "models/m1").mkdir(parents=True, exist_ok=True)
    (bob / "models/m1/config.json").write_text("{}")
    (bob / "datasets/sub").mkdir(parents=True, exist_ok=True)
    (bob / "datasets/sub/x").write_text("bob's secret")
    make_job(env.shared, "bob", BOB_SID, log=SECRET)
    return bob, alice


def relink(path: Path, target: Path) -> None:
    """What a job does: its area (or file) replaced by a symlink."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


async def _request(env: Env, method: str, path: str) -> object:
    return await env.client.request(method, f"/api/v2/files/{path}", headers=env.h("alice"),
                                    content=b"overwritten by alice" if method == "PUT" else None)


@pytest.mark.parametrize("area", ["code", "models"])
@pytest.mark.parametrize(("method", "sub"), [
    ("GET", ""), ("GET", "reward.py"), ("GET", "m1/config.json"), ("PUT", "reward.py"),
    ("PUT", "new.py"), ("PUT", "m1/new.bin"), ("PUT", "newdir/new.bin"), ("DELETE", "reward.py"),
    ("DELETE", "m1?recursive=true"),
])
async def test_an_area_root_linked_to_bobs_is_refused(env: Env, area: str, method: str,
                                                       sub: str) -> None:
    bob, alice = plant(env)
    relink(alice / area, bob / area)
    before = snapshot(env.shared)
    r = await _request(env, method, f"{area}/{sub}")
    assert r.status_code == 400, r.text
    assert f"{area} is a symbolic link" in r.json()["detail"]
    assert "bob" not in r.text and "compute_score" not in r.text
    assert snapshot(env.shared) == before  # nothing written, created or deleted anywhere
    assert (bob / "code/reward.py").read_bytes() == BOB_CODE


async def test_a_dangling_area_link_creates_nothing(env: Env) -> None:
    bob, alice = plant(env)
    relink(alice / "code", bob / "made-by-alice")
    for method, path in (("PUT", "code/x.py"), ("PUT", "code/d/x.py"), ("GET", "code")):
        r = await _request(env, method, path)
        assert r.status_code == 400 and "code is a symbolic link" in r.json()["detail"], r.text
    assert not (bob / "made-by-alice").exists()


@pytest.mark.parametrize(("method", "path", "named"), [
    ("GET", "datasets/sub", "datasets/sub"),
    ("GET", "datasets/sub/x", "datasets/sub"),
    ("PUT", "datasets/sub/x", "datasets/sub"),
    ("PUT", "datasets/sub/new/y", "datasets/sub"),
    ("DELETE", "datasets/sub/x", "datasets/sub"),
    ("DELETE", "datasets/sub?recursive=true", "datasets/sub"),
    ("GET", "datasets/file.txt", "datasets/file.txt"),
    ("PUT", "datasets/file.txt", "datasets/file.txt"),
    ("DELETE", "datasets/file.txt", "datasets/file.txt"),
    ("GET", "datasets/deeper/etc/passwd", "datasets/deeper/etc"),
])
async def test_a_link_at_any_component_is_refused_and_named(env: Env, method: str, path: str,
                                                            named: str) -> None:
    bob, alice = plant(env)
    (alice / "datasets/sub").symlink_to(bob / "datasets/sub")
    (alice / "datasets/file.txt").symlink_to(bob / "datasets/sub/x")
    (alice / "datasets/deeper").mkdir()
    (alice / "datasets/deeper/etc").symlink_to("/etc")
    before = snapshot(env.shared)
    r = await _request(env, method, path)
    assert r.status_code == 400, r.text
    assert f"{named} is a symbolic link" in r.json()["detail"]
    assert "bob's secret" not in r.text and "root:" not in r.text
    assert snapshot(env.shared) == before
    assert (bob / "datasets/sub/x").read_text() == "bob's secret"


async def test_a_linked_home_or_common_area_is_refused(env: Env) -> None:
    bob, alice = plant(env)
    (env.shared / "datasets").mkdir(exist_ok=True)
    relink(env.shared / "datasets", bob / "datasets")
    r = await _request(env, "GET", "common/datasets/sub/x")
    assert r.status_code == 400 and "common/datasets is a symbolic link" in r.json()["detail"]
    assert "bob's secret" not in r.text
    # Alice's whole home swapped for Bob's.
    os.rename(alice, env.shared / "users/alice-old")
    alice.symlink_to(bob)
    before = snapshot(env.shared)
    for method, path in (("GET", "datasets/sub/x"), ("GET", "code"), ("PUT", "code/reward.py"),
                         ("DELETE", "code/reward.py"), ("GET", "jobs")):
        r = await _request(env, method, path)
        assert r.status_code == 400, (method, path, r.text)
        assert "the home folder of alice is a symbolic link" in r.json()["detail"]
        assert "bob's secret" not in r.text and BOB_SID not in r.text
    assert snapshot(env.shared) == before


async def test_a_recursive_delete_removes_links_not_their_targets(env: Env) -> None:
    bob, alice = plant(env)
    (alice / "datasets/mine").mkdir()
    (alice / "datasets/mine/a.txt").write_text("a")
    (alice / "datasets/mine/to-bob").symlink_to(bob / "datasets/sub")
    r = await _request(env, "DELETE", "datasets/mine?recursive=true")
    assert r.status_code == 200 and r.json()["is_dir"] is True
    assert not (alice / "datasets/mine").exists()
    assert (bob / "datasets/sub/x").read_text() == "bob's secret"


async def test_a_listing_shows_links_without_following_them(env: Env) -> None:
    bob, alice = plant(env)
    (alice / "datasets/to-bob").symlink_to(bob / "datasets/sub")
    r = await _request(env, "GET", "datasets")
    assert r.status_code == 200
    assert {e["name"]: e["type"] for e in r.json()["entries"]}["to-bob"] == "link"


async def test_a_fifo_in_an_own_area_is_refused_without_blocking(env: Env) -> None:
    os.mkfifo(env.shared / "users/alice/datasets/pipe")
    r = await _request(env, "GET", "datasets/pipe")
    assert r.status_code == 400 and "not a regular file" in r.json()["detail"]


async def test_deep_and_file_as_folder_uploads_are_4xx(env: Env) -> None:
    alice = env.shared / "users/alice"
    before = snapshot(env.shared)
    r = await _request(env, "PUT", "datasets/" + "a/" * 1500 + "a")  # 3000 chars, 1501 deep
    assert r.status_code == 400 and "too deep" in r.json()["detail"], r.text
    assert snapshot(env.shared) == before

    r = await _request(env, "PUT", "datasets/own.txt")
    assert r.status_code == 201
    for path in ("datasets/own.txt/x", "datasets/own.txt/y/z"):
        r = await _request(env, "PUT", path)
        assert r.status_code == 400, r.text
        assert "datasets/own.txt is a file, not a folder" in r.json()["detail"]
    assert (alice / "datasets/own.txt").read_bytes() == b"overwritten by alice"
    r = await _request(env, "PUT", "datasets")
    assert r.status_code == 400 and "not the area itself" in r.json()["detail"]
    (alice / "datasets/folder").mkdir()
    r = await _request(env, "PUT", "datasets/folder")
    assert r.status_code == 400 and "datasets/folder is a folder" in r.json()["detail"]
    assert not list((alice / "datasets").rglob(".upload-*"))


async def test_a_path_longer_than_path_max_works_by_descriptor(env: Env) -> None:
    # 15 names of 255 bytes: the absolute path is over PATH_MAX; each call is one name.
    parts = [c * 255 for c in "abcdefghijklmno"]
    path = "datasets/" + "/".join(parts) + "/f.txt"
    r = await _request(env, "PUT", path)
    assert r.status_code == 201, r.text
    r = await _request(env, "GET", path)
    assert r.status_code == 200 and r.content == b"overwritten by alice"
    r = await _request(env, "DELETE", f"datasets/{parts[0]}?recursive=true")
    assert r.status_code == 200


async def test_logs_and_progress_refuse_a_linked_driver_log_or_jobs_folder(env: Env) -> None:
    bob, alice = plant(env)
    task_id, job = await _with_attempt(env)
    job.mkdir(parents=True)
    (job / "driver.log").symlink_to(bob / "jobs" / BOB_SID / "driver.log")
    for query in ("", "?follow=true"):
        r = await env.client.get(f"/api/v2/tasks/{task_id}/logs{query}", headers=env.h("alice"))
        assert r.status_code == 400 and SECRET not in r.text, r.text
        assert f"jobs/{job.name}/driver.log is a symbolic link" in r.json()["detail"]
    relink(alice / "jobs", bob / "jobs")
    for what in ("logs", "progress"):
        r = await env.client.get(f"/api/v2/tasks/{task_id}/{what}", headers=env.h("alice"))
        assert r.status_code == 400 and SECRET not in r.text, r.text
        assert "jobs is a symbolic link" in r.json()["detail"]


def _rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))  # type: ignore[union-attr]


async def test_a_2gib_sparse_metrics_file_leaves_rss_flat(env: Env) -> None:
    task_id, job = await _with_attempt(env)
    job.mkdir(parents=True)
    for name in ("metrics.jsonl", "a.jsonl", "b.jsonl", "c.jsonl"):
        with open(job / name, "wb") as f:
            f.truncate(2 << 30)  # 2 GiB of zeros, no newline: one endless line
    with open(job / "metrics.jsonl", "ab") as f:  # its last lines are real
        f.write(b'\n{"step": 5, "data": {"loss": 0.5}}\n')
    (job / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(job / "fifo.jsonl")
    try:  # the peak since now, where the kernel allows resetting it
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    rss, peak = _rss_kib(), _rss_kib("VmHWM")
    start = time.perf_counter()
    r = await env.client.get(f"/api/v2/tasks/{task_id}/progress", headers=env.h("alice"))
    took = time.perf_counter() - start
    grew, peak_grew = (_rss_kib() - rss) // 1024, (_rss_kib("VmHWM") - peak) // 1024
    print(f"\nprogress over 4 x 2 GiB sparse *.jsonl + /dev/zero link: {took:.3f} s, "
          f"RSS {grew:+d} MiB, peak {peak_grew:+d} MiB")
    assert r.status_code == 200 and r.json()["points"] == [{"step": 5, "metrics": {"loss": 0.5}}]
    assert grew < 100 and peak_grew < 100
    assert took < 10


async def test_a_32mib_lineless_log_tails_fast_and_capped(env: Env) -> None:
    task_id, job = await _with_attempt(env)
    job.mkdir(parents=True)
    (job / "driver.log").write_bytes(b"x" * (16 << 20) + b"\r 50%|#####" * ((16 << 20) // 11))
    start = time.perf_counter()
    r = await env.client.get(f"/api/v2/tasks/{task_id}/logs?tail=200", headers=env.h("alice"))
    took = time.perf_counter() - start
    print(f"\ntail=200 of a 32 MiB log without a newline: {took:.3f} s, {len(r.content)} bytes")
    assert r.status_code == 200
    assert took < 5
    assert len(r.content) <= jobfiles.MAX_LINE + 100
    assert r.text.startswith("[argus: the start of this line is beyond the bytes read]")
    assert r.text.endswith("\r 50%|#####")


def _reference(data: bytes, n: int) -> list[bytes]:
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", data)
    return lines[-n:] if n else []


@pytest.mark.parametrize("seed", range(30))
def test_last_lines_matches_a_plain_split(tmp_path: Path, seed: int) -> None:
    import random
    rnd = random.Random(seed)
    data = bytes(rnd.choice(b"ab\n\r") for _ in range(rnd.randrange(0, 300)))
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        for n in (0, 1, 2, 5, 1000):
            got = logread.last_lines(fd, len(data), n, max_line=1000, max_bytes=10_000,
                                     chunk=rnd.randrange(1, 8))
            assert got == _reference(data, n), (data, n)
    finally:
        os.close(fd)


def test_last_lines_caps_a_line_and_the_bytes_read(tmp_path: Path) -> None:
    data = b"first\n" + b"y" * 100 + b"z\n" + b"last"
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        assert logread.last_lines(fd, len(data), 3, max_line=10, max_bytes=1000, chunk=7) == [
            b"first\n", b"[argus: 92 bytes of this line left out] yyyyyyyyz\n", b"last"]
        got = logread.last_lines(fd, len(data), 3, max_line=10, max_bytes=20, chunk=7)
        assert got == [b"[argus: the start of this line is beyond the bytes read] yyyyyyyyz\n",
                       b"last"]
    finally:
        os.close(fd)


def test_window_lines_skips_long_and_partial_lines(tmp_path: Path) -> None:
    data = b"partial\n" + b"ok1\n" + b"L" * 50 + b"\nok2\nend"
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        assert list(logread.window_lines(fd, len(data), 10)) == [b"partial", b"ok1", b"ok2", b"end"]
        assert list(logread.window_lines(fd, len(data) - 3, 10)) == [b"ok1", b"ok2", b"end"]
    finally:
        os.close(fd)


def test_following_a_line_longer_than_a_read_moves_on(tmp_path: Path) -> None:
    job = tmp_path / "users/alice/jobs/x--a01"
    job.mkdir(parents=True)
    (job / "driver.log").write_bytes(b"z" * 3000)
    assert jobfiles.read_new(job / "driver.log", 0, limit=1000) == (b"z" * 1000, 1000)
    (job / "driver.log").write_bytes(b"z" * 10 + b"\nab")
    assert jobfiles.read_new(job / "driver.log", 0, limit=1000) == (b"z" * 10 + b"\n", 11)
