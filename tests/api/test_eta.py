"""ETAs in the API: a waiting task's ``expected_start`` (GET /tasks/{id}) and each queue
entry's come from the policy run forward over the log's projections: here the one node's
two running 4-GPU tasks, expected to end an hour after they started (the default run
time), free the GPUs the waiting tasks need, one after the other."""

from __future__ import annotations

import asyncio
import time

import pytest

from argus.events import AttemptProgressed, TaskDeferred, cluster_stream, task_stream
from argus.rayjobs.submission import submission_id_for
from argus.store import AppendBatch
from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.events import factories as f


@pytest.mark.parametrize("horizon", [200, 1], ids=["policy-run-forward", "past-the-horizon"])
async def test_waiting_tasks_show_when_they_are_expected_to_start(env: Env, horizon: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With a horizon of one, the second and third waiting tasks get the coarse estimate
    (GPUs alone, in line): on one node it is the policy's own."""
    monkeypatch.setattr("argus.views.eta.DEFAULT_HORIZON", horizon)
    now = time.time()
    running = [f"alice-ppo-20260101-00000{i}-run{i}" for i in range(2)]
    waiting = ["alice-ppo-20260101-000010-wai0", "alice-ppo-20260101-000011-wai1", "alice-ppo-20260101-000012-wai2"]
    batches = [AppendBatch(stream=cluster_stream, expected_version=None,
                           events=[f.capacity({"n0": 0.0}, at=now)])]
    for k, tid in enumerate(running):
        started = now - 600 * (k + 1)  # 10 and 20 min ago
        batches.append(AppendBatch(stream=task_stream(tid), expected_version=0, owner="alice", events=[
            f.submitted(tid, at=started), f.starting(tid, at=started), f.attempt_submitted(tid, at=started),
            f.running(tid, at=started)]))
    for tid in waiting:
        batches.append(AppendBatch(stream=task_stream(tid), expected_version=0, owner="alice",
                                   events=[f.submitted(tid, at=now), f.deferred(tid, at=now)]))
    await env.store.append_batches(batches)
    h = env.h("alice")
    hour = env.config.v2.scheduler.default_runtime_s
    first = (await env.client.get(f"/api/v2/tasks/{waiting[0]}", headers=h)).json()
    assert first["queue_position"] == 1
    assert first["expected_start"] == pytest.approx(now - 1200 + hour, abs=5)  # the older one ends first
    assert first["start_earliest"] is None  # no ETA has come true or not yet: no interval
    rows = {r["task_id"]: r for r in (await env.client.get("/api/v2/tasks", headers=h)).json()["items"]}
    assert rows[waiting[0]]["expected_start"] == pytest.approx(first["expected_start"], abs=1)
    assert rows[running[0]]["expected_start"] is None
    queue = (await env.client.get("/api/v2/queue", headers=h)).json()["items"]
    expected = {e["task_id"]: e["expected_start"] for e in queue}
    assert expected[waiting[1]] == pytest.approx(now - 600 + hour, abs=5)  # when the second one ends
    assert expected[waiting[2]] == pytest.approx(now - 1200 + 2 * hour, abs=5)  # after the first waiting one
    other = (await env.client.get("/api/v2/queue", headers=env.h("bob"))).json()["items"]
    assert [e["task_id"] for e in other] == [None, None, None]  # anonymised, ETAs still shown
    assert [e["user"] for e in other] == [None, None, None]
    assert all(e["wait_message"] == "" for e in other)  # a message names tasks and users
    assert all(e["wait_reason"] == "no_capacity_per_node" for e in other)  # the reason code stays
    assert all(e["wait_message"] for e in queue)  # the owner sees hers
    assert all(e["expected_start"] for e in other)
    # A dry run: bob's 1-GPU task, were it submitted now, would be 4th in line; it starts
    # when the first GPUs come back, at the earliest (nothing is written).
    put_dataset(env.shared, "bob")
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks/validate", headers=env.h("bob"), content=ADVANCED)
    dry = r.json()
    assert dry["ok"] and dry["position"] == 4, dry
    assert dry["expected_start"] >= now - 1200 + hour - 5, dry
    assert await env.store.head_position() == before


async def test_a_request_gets_the_last_estimates_while_the_next_are_made() -> None:
    """Only the first request waits for a forward run; later ones take the last result at
    once while the next run goes on in the background (a run takes ~0.1 s on a long queue)."""
    import asyncio

    from argus.views.eta import Estimates, EtaBoard
    from argus.config import ArgusConfig

    class Log:  # the two store calls the board makes, the second held until released
        head = 1
        release = asyncio.Event()
        runs = 0

        async def head_position(self) -> int:
            return self.head

        async def read_snapshot(self, fn: object) -> Estimates:
            self.runs += 1
            if self.runs > 1:
                await self.release.wait()
            return Estimates(starts={"t": float(self.runs)}, ranges={})

    log = Log()
    board = EtaBoard(log, ArgusConfig(), min_interval_s=0.0)  # type: ignore[arg-type]
    assert (await board.estimates()).starts == {"t": 1.0}  # the first waits for its result
    log.head = 2  # the log moved: a new run starts, and is held
    assert (await asyncio.wait_for(board.estimates(), 1.0)).starts == {"t": 1.0}  # the last result, at once
    assert (await asyncio.wait_for(board.estimates(), 1.0)).starts == {"t": 1.0}  # one run at a time
    assert log.runs == 2
    log.release.set()
    for _ in range(100):
        if (await board.estimates()).starts == {"t": 2.0}:
            break
        await asyncio.sleep(0.01)
    assert (await board.estimates()).starts == {"t": 2.0}


async def test_the_intervals_learn_from_how_the_boards_own_etas_came_true(env: Env) -> None:
    """Each waiting task's first ETA is scored when it starts; once enough are (here one),
    every ETA shown comes with an interval around it, in the task, the list and the queue."""
    from argus.scheduler.eta_calibration import EtaCalibration

    env.app.state.etas.calibration = EtaCalibration(warmup=1)
    now = time.time()
    a, b = "alice-ppo-20260101-000020-calA", "alice-ppo-20260101-000021-calB"
    await env.store.append_batches([
        AppendBatch(stream=cluster_stream, expected_version=None, events=[f.capacity({"n0": 8.0}, at=now)]),
        *[AppendBatch(stream=task_stream(t), expected_version=0, owner="alice",
                      events=[f.submitted(t, at=now), f.deferred(t, at=now)]) for t in (a, b)]])
    h = env.h("alice")
    given = (await env.client.get(f"/api/v2/tasks/{a}", headers=h)).json()
    assert given["expected_start"] is not None and given["start_earliest"] is None
    await env.store.append(task_stream(a), None, [f.starting(a, at=time.time())], owner="alice")
    env.app.state.etas._at = -float("inf")  # (the next request refreshes at once)
    for _ in range(100):
        shown = (await env.client.get(f"/api/v2/tasks/{b}", headers=h)).json()
        if shown["start_earliest"] is not None:
            break
        await asyncio.sleep(0.05)
        env.app.state.etas._at = -float("inf")
    assert env.app.state.etas.calibration.scores == 1
    # One score, of a start a moment after its ETA: the interval is that moment late.
    assert shown["expected_start"] <= shown["start_earliest"] <= shown["start_latest"], shown
    queue = {e["task_id"]: e for e in (await env.client.get("/api/v2/queue", headers=h)).json()["items"]}
    assert queue[b]["start_latest"] == pytest.approx(shown["start_latest"], abs=5)


async def _shown_starts(env: Env, task_id: str, who: str = "alice") -> tuple[float | None, float | None, float | None]:
    """``task_id``'s expected start as the task page, the task list and the queue show it."""
    h = env.h(who)
    page = (await env.client.get(f"/api/v2/tasks/{task_id}", headers=h)).json()
    rows = {r["task_id"]: r for r in (await env.client.get("/api/v2/tasks", headers=h)).json()["items"]}
    queue = {e["task_id"]: e for e in (await env.client.get("/api/v2/queue", headers=h)).json()["items"]}
    return page["expected_start"], rows[task_id]["expected_start"], queue[task_id]["expected_start"]


async def test_a_task_behind_one_with_progress_starts_when_its_steps_are_done(env: Env) -> None:
    """On a fresh stack (no run history): the running task's driver reported step 40 of 100
    at 30 s a step, so it ends 30 min after that step, not an hour after it started (the
    default); the task page, the list and the queue all say so."""
    now = time.time()
    busy, other, waiting = ("alice-ppo-20260101-000030-prog", "alice-ppo-20260101-000031-none",
                            "alice-ppo-20260101-000032-wait")
    started = now - 600
    progress = AttemptProgressed(task_id=busy, attempt_no=1, submission_id=submission_id_for(busy, 1), step=40,
                                 step_at=now - 10, first_step=1, total_steps=100, step_time_s=30.0, observed_at=now)
    batches = [AppendBatch(stream=cluster_stream, expected_version=None, events=[f.capacity({"n0": 0.0}, at=now)])]
    for tid, extra in ((busy, [progress]), (other, [])):  # two 4-GPU tasks fill the node
        batches.append(AppendBatch(stream=task_stream(tid), expected_version=0, owner="alice", events=[
            f.submitted(tid, at=started), f.starting(tid, at=started), f.attempt_submitted(tid, at=started),
            f.running(tid, at=started), *extra]))
    batches.append(AppendBatch(stream=task_stream(waiting), expected_version=0, owner="alice",
                               events=[f.submitted(waiting, at=now), f.deferred(waiting, at=now)]))
    await env.store.append_batches(batches)
    page, row, entry = await _shown_starts(env, waiting)
    assert page == pytest.approx(now - 10 + 60 * 30.0, abs=1)  # 60 steps left x 30 s, from step 40
    assert row == page and entry == page


async def test_without_a_cluster_seen_every_surface_shows_the_reservation(env: Env) -> None:
    """No forward run without a cluster: the task page, the list and the queue show the
    reactor's reservation alike (the list and the queue used to show none)."""
    tid = "alice-ppo-20260101-000040-resv"
    at = time.time()
    reserved = TaskDeferred(task_id=tid, reason="no_capacity_per_node", message="reserved", needed=f.DEMAND,
                            reserved_from=at + 900, reserved_nodes=["n0"], decided_at=at)
    await env.store.append(task_stream(tid), 0, [f.submitted(tid, at=at), reserved], owner="alice")
    assert await _shown_starts(env, tid) == (at + 900, at + 900, at + 900)
