"""The task's directory exists from submission, holding the spec as sent; a symlink a job
planted in the user's area is never followed."""

from __future__ import annotations

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
