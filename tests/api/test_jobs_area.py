"""The read-only ``jobs/`` files area: what a user's tasks wrote, listed and downloaded
(streamed), never written through the API, never another user's, and never through a
symlink a job planted. Also: the task logs and progress endpoints read job folders the
same way, and ``/me`` says where this deployment's files are."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from argus.api import jobfiles
from argus.events import AttemptStarting, SubmissionPayload, task_stream
from argus.store import AppendBatch
from tests.api.conftest import ADVANCED, Env, put_dataset

SID = "alice-ppo-20250101-120000-7f3a--a01"
BOB_SID = "bob-ppo-20250101-120000-0b0b--a01"
SECRET = "bob's secret log line"


def make_job(shared: Path, user: str, sid: str, log: str = "step:1 - loss:1.0\n") -> Path:
    """An attempt's folder as the driver and a verl trainer leave it."""
    d = shared / "users" / user / "jobs" / sid
    (d / "checkpoints" / "global_step_1").mkdir(parents=True, exist_ok=True)
    (d / "driver.log").write_text(log)
    (d / "metrics.jsonl").write_text('{"step": 1, "data": {"loss": 1.0}}\n')
    (d / "result.json").write_text('{"exit_code": 0}\n')
    (d / "checkpoints" / "global_step_1" / "model.pt").write_bytes(b"\0" * 1000)
    return d


def snapshot(root: Path) -> dict[str, tuple[bool, int]]:
    """Every path under ``root`` (links not followed) with (is a folder, size)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.is_dir() and not p.is_symlink(), st.st_size)
    return out


async def test_areas_list_jobs(env: Env) -> None:
    r = await env.client.get("/api/v2/files", headers=env.h("alice"))
    assert "jobs" in r.json()["areas"]


async def test_jobs_root_before_any_task_is_empty(env: Env) -> None:
    (env.shared / "users/alice/jobs").rmdir()  # made with the user; gone: still no error
    r = await env.client.get("/api/v2/files/jobs", headers=env.h("alice"))
    assert r.status_code == 200, r.text
    assert r.json() == {"area": "jobs", "path": "", "entries": [], "truncated": False}
    assert not (env.shared / "users/alice/jobs").exists()  # listing it made nothing


async def test_list_and_download(env: Env) -> None:
    job = make_job(env.shared, "alice", SID)
    (env.shared / "users/alice/jobs/alice-ppo-20250101-120000-7f3a").mkdir()  # the task dir
    r = await env.client.get("/api/v2/files/jobs", headers=env.h("alice"))
    assert r.status_code == 200, r.text
    assert [(e["name"], e["type"]) for e in r.json()["entries"]] == [
        ("alice-ppo-20250101-120000-7f3a", "dir"), (SID, "dir")]

    r = await env.client.get(f"/api/v2/files/jobs/{SID}/", headers=env.h("alice"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["area"] == "jobs" and body["path"] == SID and body["truncated"] is False
    entries = {e["name"]: e for e in body["entries"]}
    assert list(entries) == ["checkpoints", "driver.log", "metrics.jsonl", "result.json"]
    assert entries["checkpoints"]["type"] == "dir" and entries["checkpoints"]["is_dir"] is True
    assert entries["driver.log"]["type"] == "file"
    assert entries["driver.log"]["size"] == (job / "driver.log").stat().st_size
    assert abs(entries["driver.log"]["modified"] - (job / "driver.log").stat().st_mtime) < 1e-3

    r = await env.client.get(f"/api/v2/files/jobs/{SID}/driver.log", headers=env.h("alice"))
    assert r.status_code == 200 and r.content == (job / "driver.log").read_bytes()
    assert r.headers["content-type"] == "application/octet-stream"
    assert 'filename="driver.log"' in r.headers["content-disposition"]
    r = await env.client.get(f"/api/v2/files/jobs/{SID}/checkpoints/global_step_1/model.pt",
                             headers=env.h("alice"))
    assert r.status_code == 200 and r.content == b"\0" * 1000

    r = await env.client.get(f"/api/v2/files/jobs/{SID}/nothing.txt", headers=env.h("alice"))
    assert r.status_code == 404


async def test_a_file_name_with_a_newline_downloads_with_a_safe_header(env: Env) -> None:
    job = make_job(env.shared, "alice", SID)
    (job / "odd\nname \u00e9.txt").write_text("x")
    r = await env.client.get(f"/api/v2/files/jobs/{SID}", headers=env.h("alice"))
    assert "odd\nname \u00e9.txt" in [e["name"] for e in r.json()["entries"]]
    r = await env.client.get(f"/api/v2/files/jobs/{SID}/odd%0Aname%20%C3%A9.txt",
                             headers=env.h("alice"))
    assert r.status_code == 200 and r.content == b"x"
    assert "filename*=UTF-8''odd%0Aname%20%C3%A9.txt" in r.headers["content-disposition"]


@pytest.mark.parametrize("method,path", [
    ("PUT", f"jobs/{SID}/driver.log"),
    ("PUT", f"jobs/{SID}/new.txt"),
    ("PUT", "jobs/new-folder/x.txt"),
    ("PUT", "jobs/x.txt"),
    ("PUT", f"jobs/{SID}/link/x.txt"),
    ("DELETE", f"jobs/{SID}/driver.log"),
    ("DELETE", f"jobs/{SID}?recursive=true"),
    ("DELETE", "jobs?recursive=true"),
])
async def test_jobs_is_read_only_and_nothing_is_written(env: Env, method: str, path: str) -> None:
    make_job(env.shared, "alice", SID)
    (env.shared / f"users/alice/jobs/{SID}/link").symlink_to(env.shared / "users/alice/code")
    before = snapshot(env.shared)
    r = await env.client.request(method, f"/api/v2/files/{path}", headers=env.h("alice"),
                                 content=b"overwritten" if method == "PUT" else None)
    # Never written through the API; deleted only what a finished task of the caller's
    # wrote (tests/api/test_outputs_delete.py): SID is no task of hers here.
    if path.startswith("jobs?"):  # the area itself is never a write path (argus.api.filepath)
        assert r.status_code == 400, r.text
        assert "not the area itself" in r.json()["detail"]
    elif method == "PUT":
        assert r.status_code == 403, r.text
        assert "jobs is written by your tasks" in r.json()["detail"]
    else:
        assert r.status_code == 409, r.text
        assert "not the folder of a task of yours" in r.json()["detail"]
    assert snapshot(env.shared) == before
    assert (env.shared / f"users/alice/jobs/{SID}/driver.log").read_text() == "step:1 - loss:1.0\n"


@pytest.mark.parametrize("who", ["bob", "admin"])
async def test_another_users_job_folder_is_not_reachable(env: Env, who: str) -> None:
    make_job(env.shared, "alice", SID, log=SECRET)
    for path in (f"jobs/{SID}", f"jobs/{SID}/driver.log", f"jobs/../alice/jobs/{SID}/driver.log",
                 f"jobs/..%2F..%2Falice/jobs/{SID}/driver.log"):
        r = await env.client.get(f"/api/v2/files/{path}", headers=env.h(who))
        assert 400 <= r.status_code < 500, (path, r.status_code)
        assert SECRET not in r.text
    r = await env.client.get("/api/v2/files/jobs", headers=env.h(who))
    assert r.status_code == 200 and SID not in r.text  # their own (empty) jobs area


async def test_planted_symlinks_are_refused_and_named(env: Env) -> None:
    bob_job = make_job(env.shared, "bob", BOB_SID, log=SECRET)
    job = make_job(env.shared, "alice", SID)
    (job / "evil.log").symlink_to(bob_job / "driver.log")
    (job / "evil_dir").symlink_to(bob_job)
    (job / "etc").symlink_to("/etc")
    (env.shared / "users/alice/jobs/linked--a01").symlink_to(bob_job)

    r = await env.client.get(f"/api/v2/files/jobs/{SID}", headers=env.h("alice"))
    kinds = {e["name"]: e["type"] for e in r.json()["entries"]}
    assert kinds["evil.log"] == kinds["evil_dir"] == kinds["etc"] == "link"  # listed, not followed

    for path, named in ((f"{SID}/evil.log", f"jobs/{SID}/evil.log"),
                        (f"{SID}/evil_dir", f"jobs/{SID}/evil_dir"),
                        (f"{SID}/evil_dir/driver.log", f"jobs/{SID}/evil_dir"),
                        (f"{SID}/etc/passwd", f"jobs/{SID}/etc"),
                        ("linked--a01/driver.log", "jobs/linked--a01")):
        r = await env.client.get(f"/api/v2/files/jobs/{path}", headers=env.h("alice"))
        assert r.status_code == 400, (path, r.text)
        assert named in r.json()["detail"] and "symbolic link" in r.json()["detail"]
        assert SECRET not in r.text and "root:" not in r.text


async def test_a_symlinked_jobs_folder_is_refused(env: Env) -> None:
    bob_job = make_job(env.shared, "bob", BOB_SID, log=SECRET)
    (env.shared / "users/alice/jobs").rmdir()
    (env.shared / "users/alice/jobs").symlink_to(bob_job.parent)
    r = await env.client.get("/api/v2/files/jobs", headers=env.h("alice"))
    assert r.status_code == 400 and "jobs is a symbolic link" in r.json()["detail"]
    assert BOB_SID not in r.text


async def test_a_planted_fifo_is_refused_without_blocking(env: Env) -> None:
    job = make_job(env.shared, "alice", SID)
    os.mkfifo(job / "pipe")
    r = await env.client.get(f"/api/v2/files/jobs/{SID}/pipe", headers=env.h("alice"))
    assert r.status_code == 400 and "not a regular file" in r.json()["detail"]


async def test_a_listing_is_capped(env: Env) -> None:
    job = make_job(env.shared, "alice", SID)
    many = job / "many"
    many.mkdir()
    for i in range(jobfiles.MAX_LISTING + 5):
        (many / f"f{i:05d}").touch()
    r = await env.client.get(f"/api/v2/files/jobs/{SID}/many", headers=env.h("alice"))
    body = r.json()
    assert len(body["entries"]) == jobfiles.MAX_LISTING and body["truncated"] is True


async def test_a_download_stops_at_the_size_it_had_when_opened(tmp_path: Path) -> None:
    # A running job's log grows while it is downloaded: the answer ends where it was.
    users = tmp_path / "users"
    job = users / "alice" / "jobs" / SID
    job.mkdir(parents=True)
    (job / "driver.log").write_bytes(b"a" * 1000)
    fd, st = jobfiles.walk(users, ["alice", "jobs", SID, "driver.log"])
    with open(job / "driver.log", "ab") as f:
        f.write(b"b" * 1000)
    assert b"".join(jobfiles.read_chunks(fd, st.st_size, chunk=300)) == b"a" * 1000


async def test_me_gives_this_deployments_paths(env: Env) -> None:
    r = await env.client.get("/api/v2/me", headers=env.h("alice"))
    assert r.json()["shared_root"] == str(env.shared)
    assert r.json()["home"] == str(env.shared / "users" / "alice")


async def _with_attempt(env: Env) -> tuple[str, Path]:
    """Alice's task with one attempt started (as the reactor records it)."""
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED)
    task_id = r.json()["task_id"]
    sid = f"{task_id}--a01"
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    await env.store.append_batches([AppendBatch(
        stream=task_stream(task_id), expected_version=1, owner="alice", events=[
            AttemptStarting(task_id=task_id, attempt_no=1, submission_id=sid, payload=payload,
                            decided_at=time.time())])])
    return task_id, env.shared / "users/alice/jobs" / sid


async def test_task_logs_and_progress_read_the_job_folder(env: Env) -> None:
    task_id, job = await _with_attempt(env)
    job.mkdir(parents=True)
    (job / "driver.log").write_text("hello\nstep:1 - loss:0.5\n")
    (job / "metrics.jsonl").write_text('{"step": 1, "data": {"loss": 0.5}}\n'
                                       '{"step": 2, "data": {"loss": 0.25}}\n')
    r = await env.client.get(f"/api/v2/tasks/{task_id}/logs", headers=env.h("alice"))
    assert r.text == "hello\nstep:1 - loss:0.5\n"
    r = await env.client.get(f"/api/v2/tasks/{task_id}/progress", headers=env.h("alice"))
    assert [p["step"] for p in r.json()["points"]] == [1, 2]


async def test_task_logs_and_progress_do_not_follow_planted_links(env: Env) -> None:
    bob_job = make_job(env.shared, "bob", BOB_SID, log=f"{SECRET}\nstep:7 - loss:9.0\n")
    (bob_job / "metrics.jsonl").write_text('{"step": 7, "data": {"loss": 9.0}}\n')
    task_id, job = await _with_attempt(env)
    job.mkdir(parents=True)
    (job / "driver.log").symlink_to(bob_job / "driver.log")
    (job / "metrics.jsonl").symlink_to(bob_job / "metrics.jsonl")
    (job / "sub").symlink_to(bob_job)  # a linked folder is not searched for metrics*.jsonl
    r = await env.client.get(f"/api/v2/tasks/{task_id}/logs", headers=env.h("alice"))
    # The linked log is refused and named (issue 23); linked metrics files are skipped.
    assert r.status_code == 400 and SECRET not in r.text
    assert f"jobs/{job.name}/driver.log is a symbolic link" in r.json()["detail"]
    r = await env.client.get(f"/api/v2/tasks/{task_id}/progress", headers=env.h("alice"))
    assert r.json()["points"] == []
    # The attempt's folder itself replaced by a link to bob's: not followed either.
    for p in job.iterdir():
        p.unlink()
    job.rmdir()
    job.symlink_to(bob_job)
    for what in ("logs", "progress"):
        r = await env.client.get(f"/api/v2/tasks/{task_id}/{what}", headers=env.h("alice"))
        assert r.status_code == 400 and SECRET not in r.text and "loss" not in r.text
        assert f"jobs/{job.name} is a symbolic link" in r.json()["detail"]


def test_progress_reads_nested_metrics_and_falls_back_to_the_log(tmp_path: Path) -> None:
    job = tmp_path / "users" / "alice" / "jobs" / SID
    (job / "proj").mkdir(parents=True)
    (job / "proj" / "metrics_run.jsonl").write_text('{"step": 3, "data": {"loss": 0.1}}\n')
    (job / "proj" / "other.jsonl").write_text('{"step": 9, "data": {"loss": 9.0}}\n')
    assert jobfiles.parse_progress(job) == [(3, {"loss": 0.1})]
    (job / "proj" / "metrics_run.jsonl").write_text("not json\n")
    (job / "driver.log").write_text("step:4 - loss:0.2 - lr:0.001\n")
    assert jobfiles.parse_progress(job) == [(4, {"loss": 0.2, "lr": 0.001})]
    assert jobfiles.tail_lines(job / "driver.log", 5) == ("step:4 - loss:0.2 - lr:0.001\n", 29)
