"""The task's directory exists from submission, holding the spec as sent; a symlink a job
planted in the user's area is never followed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from argus.service.taskdir import TaskDirs
from tests.api.conftest import ADVANCED, Env, put_dataset


async def test_submission_makes_the_task_dir_with_the_raw_spec(env: Env) -> None:
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED)
    assert r.status_code == 201, r.text
    task_dir = env.shared / "users/alice/jobs" / r.json()["task_id"]
    assert (task_dir / "spec.yaml").read_text() == ADVANCED


async def test_a_planted_jobs_link_is_not_followed(env: Env) -> None:
    put_dataset(env.shared, "alice")
    bob_jobs = env.shared / "users/bob/jobs"
    bob_jobs.mkdir(parents=True, exist_ok=True)
    alice_jobs = env.shared / "users/alice/jobs"
    if alice_jobs.exists():
        alice_jobs.rmdir()
    alice_jobs.symlink_to(bob_jobs)  # what alice's own job code could do
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED)
    assert r.status_code == 201, r.text  # the task is recorded; its directory is not made
    assert list(bob_jobs.iterdir()) == []


async def test_a_gathering_of_directories_keeps_each_callers_outcome(tmp_path: Path) -> None:
    """Concurrent submissions' directories are made together (one thread hop, one walk per
    user): a link alice's job planted fails her tasks alone, bob's are made, and a
    directory made before is made again with its spec replaced whole."""
    (tmp_path / "users/bob/jobs/t-old").mkdir(parents=True)
    (tmp_path / "users/bob/jobs/t-old/spec.yaml").write_text("stale")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "users/alice").mkdir(parents=True)
    (tmp_path / "users/alice/jobs").symlink_to(tmp_path / "elsewhere")
    dirs = TaskDirs(tmp_path)
    try:
        got = await asyncio.gather(
            dirs.make("bob", "t-1", "one"), dirs.make("alice", "a-1", "two"),
            dirs.make("bob", "t-old", "three"), dirs.make("alice", "a-2", "four"))
    finally:
        await dirs.close()
    assert got[0] is None and got[2] is None
    assert isinstance(got[1], OSError) and isinstance(got[3], OSError)
    assert (tmp_path / "users/bob/jobs/t-1/spec.yaml").read_text() == "one"
    assert (tmp_path / "users/bob/jobs/t-old/spec.yaml").read_text() == "three"
    assert sorted(os.listdir(tmp_path / "users/bob/jobs/t-old")) == ["spec.yaml"]
    assert list((tmp_path / "elsewhere").iterdir()) == []
